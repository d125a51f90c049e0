//! `vmbench-pkg OUT_DIR`: writes vmbench's man pages (`OUT_DIR/man/vmbench.1`,
//! `vmbench-matrix.1`, `vmbench-image-build.1`, ... one per subcommand, with clap_mangen) and
//! its bash, zsh and fish completions (`OUT_DIR/completions/`, with clap_complete), all from the
//! clap definitions in `vmbench::cli`, so they cannot drift from the binary they ship with.
//! scripts/build-deb runs it before `cargo deb`; Cargo.toml's `[package.metadata.deb]` packages
//! the results.

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

fn main() -> Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: vmbench-pkg OUT_DIR")?;
    // A page or completion left from a removed subcommand must not be packaged.
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let man = out.join("man");
    let completions = out.join("completions");
    man_pages(&man)?;
    shell_completions(&completions)?;
    println!(
        "vmbench-pkg: man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(())
}

fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(vmbench::cli::Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))
}

/// `vmbench.bash`, `_vmbench` and `vmbench.fish`.
fn shell_completions(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = vmbench::cli::Cli::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "vmbench", dir)
            .with_context(|| format!("writing the {shell} completion into {}", dir.display()))?;
    }
    Ok(())
}
