//! The image recipe (images/recipe.toml), embedded at compile time.

use serde::Deserialize;

/// The recipe text; hashed into the image id.
pub const RECIPE_TEXT: &str = include_str!("../../images/recipe.toml");

/// What goes into the image.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The kernel and its modules.
    pub kernel: KernelRecipe,
    /// The fio build.
    pub fio: FioRecipe,
    /// Host binaries copied with their libraries.
    pub binaries: Vec<Binary>,
    /// busybox and its applet links.
    pub busybox: Busybox,
}

/// Kernel part of the recipe.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRecipe {
    /// Metapackage naming the kernel (`linux-image-amd64`).
    pub package: String,
    /// Modules to load at boot, by name (dependencies are added).
    pub modules: Vec<String>,
    /// Modules the agent loads at boot only when the guest has a virtio-scsi controller
    /// (dependencies are added; those in `modules` are not repeated). Default: none.
    #[serde(default)]
    pub scsi: Vec<String>,
    /// Modules the agent loads only before the first step that makes or mounts a filesystem
    /// (dependencies are added; those already loaded at boot are not repeated). Default: none.
    #[serde(default)]
    pub on_demand: Vec<String>,
    /// Like `on_demand`, but in the second (extra) archive only. Default: none.
    #[serde(default)]
    pub on_demand_extra: Vec<String>,
}

/// fio part of the recipe.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FioRecipe {
    /// Debian source package.
    pub source_package: String,
    /// `./configure` flags.
    pub configure_flags: Vec<String>,
    /// `make -j` value.
    pub make_jobs: u32,
}

/// A host binary to copy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binary {
    /// File name, looked up in the sbin/bin directories.
    pub name: String,
    /// The Debian package that provides it (its version goes into the id).
    pub package: String,
    /// In the second archive, which only the cells that need it boot with. Default: false.
    #[serde(default)]
    pub extra: bool,
}

/// busybox part of the recipe.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Busybox {
    /// Host path of the static busybox.
    pub path: String,
    /// Its Debian package.
    pub package: String,
    /// Applets linked in /usr/bin.
    pub applets: Vec<String>,
}

impl KernelRecipe {
    /// Every on-demand module, the base's then the extra archive's: the list the agent reads
    /// when it boots with both archives.
    pub fn on_demand_all(&self) -> Vec<String> {
        self.on_demand
            .iter()
            .chain(&self.on_demand_extra)
            .cloned()
            .collect()
    }
}

impl Recipe {
    /// Parses the embedded recipe.
    pub fn embedded() -> Result<Self, toml::de::Error> {
        toml::from_str(RECIPE_TEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_recipe_parses_and_names_the_needed_modules() {
        let r = Recipe::embedded().unwrap();
        for m in ["virtio_blk", "virtio_console", "xen_blkfront"] {
            assert!(r.kernel.modules.iter().any(|x| x == m), "{m} missing");
        }
        // The SCSI stack only for a guest with a virtio-scsi controller.
        for m in ["scsi_mod", "sd_mod", "virtio_scsi"] {
            assert!(r.kernel.scsi.iter().any(|x| x == m), "{m} missing");
            assert!(
                !r.kernel.modules.iter().any(|x| x == m),
                "{m} at every boot"
            );
        }
        // Filesystems, device-mapper and virtio-fs wait for the step that needs them: every
        // boot paid ~1.7 s (signature checks under TCG) for them before.
        let later = |m: &str| {
            r.kernel.on_demand.iter().any(|x| x == m)
                || r.kernel.on_demand_extra.iter().any(|x| x == m)
        };
        for m in ["ext4", "xfs", "dm_mod", "virtiofs"] {
            assert!(later(m), "{m} missing");
            assert!(!r.kernel.modules.iter().any(|x| x == m), "{m} at boot");
        }
        // What only some cells use is in the extra archive: the base stays small (issue 28).
        for m in ["xfs", "dm_mod", "virtiofs"] {
            assert!(
                r.kernel.on_demand_extra.iter().any(|x| x == m),
                "{m} in the base"
            );
        }
        for b in &r.binaries {
            assert_eq!(b.extra, b.name != "mke2fs", "{}", b.name);
        }
        assert!(r.fio.configure_flags.iter().any(|f| f == "--build-static"));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let bad = RECIPE_TEXT.replace("[fio]", "[fio]\nsurprise = 1");
        assert!(toml::from_str::<Recipe>(&bad).is_err());
    }
}
