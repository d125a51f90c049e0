//! Host rows (`--hypervisor host`): the steps a guest's agent would run, run by the host on the
//! same storage. The engine's plan is the guest's, unchanged: the same job text and bonnie++
//! arguments; only the placeholders change (`{disk}` becomes the disk's file or device,
//! `{dir}` and bonnie++'s test directory the host's mountpoint). The engine's own `parse` reads
//! the output, so a host row and a guest row are the same measurement in two places.
//!
//! The binaries are the image's where the image has its own build (the static fio the guest
//! runs, from the image cache), else the host's (bonnie++: the image copies the host's Debian
//! binary); which one ran is a cell parameter. The engine's CPU (user, system) comes from the
//! kernel's accounting of the child (`wait4`), over the measured step.
//!
//! Bounds: a job whose text names a target other than the cell's own disk or directory, or a
//! bonnie++ test directory other than the mountpoint, is refused before anything runs.

use super::{fio_escape, step_name};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmbench_proto::{Filesystem, Hello, Step, Volume, TEST_MOUNTPOINT};

/// An engine binary a host cell runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// The program (a path, or a name found on `PATH`).
    pub path: PathBuf,
    /// Where it comes from, for the reader.
    pub origin: &'static str,
    /// Its version as the engine's provenance records it.
    pub version: Option<String>,
}

/// The engine binaries of a host cell.
#[derive(Debug, Clone)]
pub struct Engines {
    fio: Binary,
    bonnie: Binary,
}

impl Engines {
    /// The image's own builds where it has them (`image_bins`, by tool name, from
    /// `image::engine_binaries`), the host's otherwise.
    pub fn find(image_bins: &BTreeMap<String, PathBuf>) -> Engines {
        let fio = match image_bins.get("fio") {
            Some(p) => Binary {
                path: p.clone(),
                origin: "the image's static build, as the guest runs it",
                version: command_version(p, "--version"),
            },
            None => Binary {
                path: "fio".into(),
                origin: "the host's (the image's build is not in the cache)",
                version: command_version(Path::new("fio"), "--version"),
            },
        };
        let bonnie = Binary {
            path: "bonnie++".into(),
            origin: "the host's Debian package (the image copies the same binary)",
            version: dpkg_version("bonnie++"),
        };
        Engines { fio, bonnie }
    }

    /// What a guest would say in its hello, for the provenance's engine versions.
    pub fn hello(&self) -> Hello {
        Hello {
            protocol: vmbench_proto::PROTOCOL_VERSION,
            agent_version: "host".into(),
            kernel: host_kernel(),
            fio_version: self.fio.version.clone(),
            bonnie_version: self.bonnie.version.clone(),
            cpus: 0,
            mem_kib: 0,
            block_devices: vec![],
            uptime_ms: 0,
        }
    }

    /// The binary that runs `step`'s engine, if it runs one.
    fn for_step(&self, step: &Step) -> Option<&Binary> {
        match step {
            Step::Fio { .. } => Some(&self.fio),
            Step::Bonnie { .. } => Some(&self.bonnie),
            _ => None,
        }
    }

    /// `host_engine`: which binary ran the cell's engine, its version and origin.
    pub fn param(&self, steps: &[Step]) -> Option<(String, String)> {
        let b = steps.iter().find_map(|s| self.for_step(s))?;
        let v = b.version.as_deref().unwrap_or("version unknown");
        Some((
            "host_engine".into(),
            format!("{} ({v}; {})", b.path.display(), b.origin),
        ))
    }
}

fn command_version(program: &Path, arg: &str) -> Option<String> {
    let out = Command::new(program).arg(arg).output().ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

fn dpkg_version(package: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// `uname -r` of the host.
pub fn host_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What a step of the cell's layout asks the host to do before the engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutStep {
    /// Make this filesystem on the whole disk and mount it.
    Mkfs(Filesystem),
    /// The storage is a directory already (the guest would mount it with virtio-fs).
    SharedDir,
}

/// The layout part of a step, or `None` for an engine step.
pub fn layout_step(step: &Step) -> Option<Result<LayoutStep, HostStepError>> {
    match step {
        Step::Mkfs {
            fs,
            volume: Volume::Whole,
        } => Some(Ok(LayoutStep::Mkfs(*fs))),
        Step::Mkfs { .. } => Some(Err(HostStepError::NotOnHost("a partition or LVM volume"))),
        Step::MountVirtiofs { .. } => Some(Ok(LayoutStep::SharedDir)),
        _ => None,
    }
}

/// What the placeholders become on the host.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// `{disk}`: the disk's file or device (layout raw).
    pub disk: Option<String>,
    /// `{dir}` and bonnie++'s test directory: the mountpoint (or the shared directory).
    pub dir: Option<PathBuf>,
}

/// A step's bounds: when to give up on it (the run's interrupt, a deadline), and the memory
/// its engine may use.
pub struct Stop<'a> {
    /// True once the run is interrupted.
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
    /// The step's deadline.
    pub deadline: Instant,
    /// The cgroup that caps the engine's page cache at the guest's RAM, if one could be made.
    pub memory: Option<&'a super::memcap::MemCap>,
}

/// CPU time the kernel accounted to the engine's process (and its waited-for children).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUsage {
    /// User time.
    pub user: Duration,
    /// System time.
    pub sys: Duration,
    /// Wall time of the step.
    pub wall: Duration,
}

impl CpuUsage {
    /// The sum of two steps' usage.
    pub fn plus(self, o: CpuUsage) -> CpuUsage {
        CpuUsage {
            user: self.user + o.user,
            sys: self.sys + o.sys,
            wall: self.wall + o.wall,
        }
    }
}

/// One step's outputs.
#[derive(Debug, Default)]
pub struct StepRun {
    /// Artifacts by name (the engine's output, its logs).
    pub artifacts: Vec<(String, String)>,
    /// The engine's CPU time, for a step that ran one.
    pub cpu: Option<CpuUsage>,
}

/// Why a host step did not run to a good end.
#[derive(Debug, thiserror::Error)]
pub enum HostStepError {
    /// The step has no host equivalent here (the planner skips such cells).
    #[error("{0} is not made by a host cell")]
    NotOnHost(&'static str),
    /// The job names a target outside the cell's own disk or directory.
    #[error("refused on the host: {0}")]
    Refused(String),
    /// A placeholder with nothing to put in it.
    #[error("the step needs {0}, which this host cell has not")]
    NoTarget(&'static str),
    /// Host I/O around the step.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The engine exited non-zero.
    #[error("{step} exited with {code}: {stderr}")]
    Failed {
        /// The step's name.
        step: &'static str,
        /// Its exit code (-1: a signal).
        code: i32,
        /// The tail of its stderr.
        stderr: String,
    },
    /// The run was interrupted; the engine was killed.
    #[error("interrupted")]
    Interrupted,
    /// The deadline passed; the engine was killed.
    #[error("{step} still running after {secs} s: killed")]
    TimedOut {
        /// The step's name.
        step: &'static str,
        /// The time it had.
        secs: u64,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> HostStepError {
    move |source| HostStepError::Io { what, source }
}

/// Runs one engine step (drop caches, fio, bonnie++) on the host, in `job_dir` (private,
/// created). Layout steps go through [`layout_step`] instead.
pub fn run_step(
    step: &Step,
    engines: &Engines,
    target: &Target,
    job_dir: &Path,
    stop: &Stop<'_>,
) -> Result<StepRun, HostStepError> {
    match step {
        Step::DropCaches => {
            super::drop_host_caches();
            Ok(StepRun::default())
        }
        Step::Fio {
            job_text,
            args,
            output_name,
            log_prefix,
        } => {
            let text = bounded_job(job_text, target)?;
            let args = (args.iter())
                .map(|a| substitute(a, target))
                .collect::<Result<Vec<_>, _>>()?;
            let job = JobRun { job_dir, stop };
            job.fio(
                &engines.fio,
                &text,
                &args,
                output_name,
                log_prefix.as_deref(),
            )
        }
        Step::Bonnie { args, output_name } => {
            let args = bounded_bonnie_args(args, target)?;
            let job = JobRun { job_dir, stop };
            job.bonnie(&engines.bonnie, &args, output_name)
        }
        other => Err(HostStepError::NotOnHost(step_name(other))),
    }
}

/// `{disk}` and `{dir}` in `text` as the host's target.
fn substitute(text: &str, t: &Target) -> Result<String, HostStepError> {
    let mut s = text.to_string();
    if s.contains("{disk}") {
        let disk = t.disk.as_deref().ok_or(HostStepError::NoTarget("a disk"))?;
        s = s.replace("{disk}", &fio_escape(disk));
    }
    if s.contains("{dir}") {
        let dir = t
            .dir
            .as_ref()
            .ok_or(HostStepError::NoTarget("a directory"))?;
        s = s.replace("{dir}", &fio_escape(&dir.display().to_string()));
    }
    Ok(s)
}

/// The job text with its placeholders filled, refused when any line names a target that is
/// not the disk or under the directory (the guest's job names `{disk}` or `{dir}/...` only).
pub fn bounded_job(text: &str, t: &Target) -> Result<String, HostStepError> {
    let filled = substitute(text, t)?;
    let disk = t.disk.as_deref().map(fio_escape);
    let dir = t.dir.as_ref().map(|d| fio_escape(&d.display().to_string()));
    for line in filled.lines() {
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim();
        if key.contains('$') || key == "opendir" || key == "filename_format" {
            return Err(HostStepError::Refused(line.trim().to_string()));
        }
        if key != "filename" && key != "directory" {
            continue;
        }
        let inside = dir.as_deref().is_some_and(|d| {
            value == d || (value.starts_with(&format!("{d}/")) && !value.contains(".."))
        });
        if !(inside || disk.as_deref() == Some(value)) {
            return Err(HostStepError::Refused(line.trim().to_string()));
        }
    }
    Ok(filled)
}

/// bonnie++'s arguments with the guest's test directory replaced by the host's; any other
/// `-d` is refused.
pub fn bounded_bonnie_args(args: &[String], t: &Target) -> Result<Vec<String>, HostStepError> {
    let dir = t
        .dir
        .as_ref()
        .ok_or(HostStepError::NoTarget("a directory"))?;
    let mut out = Vec::with_capacity(args.len());
    let mut after_d = false;
    for a in args {
        let a = substitute(a, t)?;
        if after_d {
            if a != TEST_MOUNTPOINT && Path::new(&a) != dir {
                return Err(HostStepError::Refused(format!("bonnie++ -d {a}")));
            }
            out.push(dir.display().to_string());
        } else {
            out.push(a.clone());
        }
        after_d = a == "-d";
    }
    Ok(out)
}

/// One engine run in the job directory.
struct JobRun<'a, 'b> {
    job_dir: &'a Path,
    stop: &'a Stop<'b>,
}

impl JobRun<'_, '_> {
    fn fresh_dir(&self) -> Result<(), HostStepError> {
        let _ = std::fs::remove_dir_all(self.job_dir);
        std::fs::create_dir_all(self.job_dir)
            .map_err(io(format!("creating {}", self.job_dir.display())))
    }

    /// The agent's fio step: the job file in the job directory, JSON to `output_name`, the
    /// per-second logs starting with `log_prefix` shipped too.
    fn fio(
        &self,
        bin: &Binary,
        text: &str,
        args: &[String],
        output_name: &str,
        log_prefix: Option<&str>,
    ) -> Result<StepRun, HostStepError> {
        self.fresh_dir()?;
        let job = self.job_dir.join("job.fio");
        std::fs::write(&job, text).map_err(io(format!("writing {}", job.display())))?;
        let mut cmd = Command::new(&bin.path);
        cmd.current_dir(self.job_dir)
            .arg("--output-format=json")
            .arg(format!("--output={output_name}"))
            .args(args)
            .arg("job.fio");
        let done = run_child(cmd, "fio", self.stop)?;
        let mut run = StepRun {
            cpu: Some(done.cpu),
            ..StepRun::default()
        };
        for name in self.outputs(output_name, log_prefix)? {
            let p = self.job_dir.join(&name);
            let text =
                std::fs::read_to_string(&p).map_err(io(format!("reading {}", p.display())))?;
            run.artifacts.push((name, text));
        }
        done.check("fio")?;
        Ok(run)
    }

    /// The output file and the logs, by name.
    fn outputs(&self, output: &str, prefix: Option<&str>) -> Result<Vec<String>, HostStepError> {
        let mut names = vec![output.to_string()];
        let Some(prefix) = prefix.filter(|p| !p.is_empty()) else {
            return Ok(names);
        };
        let entries = std::fs::read_dir(self.job_dir)
            .map_err(io(format!("listing {}", self.job_dir.display())))?;
        let mut logs: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(prefix) && n != output)
            .collect();
        logs.sort();
        names.extend(logs);
        Ok(names)
    }

    /// The agent's bonnie++ step: its stdout is the artifact.
    fn bonnie(&self, bin: &Binary, args: &[String], name: &str) -> Result<StepRun, HostStepError> {
        self.fresh_dir()?;
        let mut cmd = Command::new(&bin.path);
        cmd.current_dir(self.job_dir).args(args);
        let done = run_child(cmd, "bonnie++", self.stop)?;
        done.check("bonnie++")?;
        Ok(StepRun {
            artifacts: vec![(name.to_string(), done.stdout)],
            cpu: Some(done.cpu),
        })
    }
}

/// A child that ran to its end.
struct Done {
    code: i32,
    stdout: String,
    stderr: String,
    cpu: CpuUsage,
}

impl Done {
    fn check(&self, step: &'static str) -> Result<(), HostStepError> {
        if self.code == 0 {
            return Ok(());
        }
        let lines: Vec<&str> = self.stderr.lines().collect();
        Err(HostStepError::Failed {
            step,
            code: self.code,
            stderr: lines[lines.len().saturating_sub(12)..].join("\n"),
        })
    }
}

/// Runs `cmd` to its end, reaping it with `wait4` for its CPU time; kills it on interrupt or
/// past the deadline.
fn run_child(mut cmd: Command, step: &'static str, stop: &Stop<'_>) -> Result<Done, HostStepError> {
    let t0 = Instant::now();
    // The engine dies with vmbench (a kill -9 of the run): an orphaned engine would keep
    // writing in the cell's mount, which then neither unmounts nor lets its loop device go.
    // SAFETY: prctl is async-signal-safe; the closure touches nothing else.
    let procs = stop.memory.map(|m| m.procs().clone());
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Before exec: every page the engine caches is charged to the cap.
            if let Some(p) = &procs {
                super::memcap::join_self(p)?;
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("starting {step}")))?;
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let pid = child.id() as libc::pid_t;
    let (status, usage) = loop {
        if let Some(done) = wait4(pid, libc::WNOHANG) {
            break done;
        }
        let late = Instant::now() > stop.deadline;
        if (stop.cancelled)() || late {
            // SAFETY: kill on our own child's pid, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = wait4(pid, 0);
            return Err(match late {
                true => HostStepError::TimedOut {
                    step,
                    secs: stop.deadline.saturating_duration_since(t0).as_secs(),
                },
                false => HostStepError::Interrupted,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(Done {
        code: exit_code(status),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        cpu: CpuUsage {
            user: tv(usage.ru_utime),
            sys: tv(usage.ru_stime),
            wall: t0.elapsed(),
        },
    })
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// `wait4(pid)`: its status and resource usage once it has exited.
fn wait4(pid: libc::pid_t, flags: libc::c_int) -> Option<(libc::c_int, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our locals.
    let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
    (r == pid).then_some((status, usage))
}

/// Reads a child's pipe to its end on a thread, lossily decoded.
fn reader(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// The engine's CPU over the measured window as metrics: `host_engine_{usr,sys}_cpu_pct` and
/// their sum, in percent of one CPU over the window's wall time (a guest row's counterpart is
/// its domain's CPU).
pub fn cpu_metrics(cpu: CpuUsage) -> Vec<crate::results::Metric> {
    use crate::results::{Better, Metric};
    let wall = cpu.wall.as_secs_f64().max(1e-3);
    let pct = |d: Duration| d.as_secs_f64() / wall * 100.0;
    [
        (
            "host_engine_usr_cpu_pct",
            "Host engine CPU (usr)",
            pct(cpu.user),
        ),
        (
            "host_engine_sys_cpu_pct",
            "Host engine CPU (sys)",
            pct(cpu.sys),
        ),
        (
            "host_engine_cpu_pct",
            "Host engine CPU (total)",
            pct(cpu.user + cpu.sys),
        ),
    ]
    .into_iter()
    .map(|(k, l, v)| Metric::num(k, l, "%", Better::Lower, v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(disk: Option<&str>, dir: Option<&str>) -> Target {
        Target {
            disk: disk.map(str::to_string),
            dir: dir.map(PathBuf::from),
        }
    }

    #[test]
    fn the_guests_job_is_pointed_at_the_hosts_disk_or_mountpoint() {
        let t = target(Some("/w/local/x:1.raw"), None);
        let j = bounded_job("[g]\nfilename={disk}\nrw=randread\n", &t).unwrap();
        assert!(j.contains("filename=/w/local/x\\:1.raw\n"), "{j}");
        let t = target(None, Some("/w/cell-001/vmbench-hostfs"));
        let j = bounded_job("[g]\nfilename={dir}/vmbench.fio\n", &t).unwrap();
        assert!(
            j.contains("filename=/w/cell-001/vmbench-hostfs/vmbench.fio"),
            "{j}"
        );
        assert!(matches!(
            bounded_job("[g]\nfilename={disk}\n", &t),
            Err(HostStepError::NoTarget(_))
        ));
    }

    #[test]
    fn a_job_naming_anything_else_is_refused() {
        let t = target(Some("/w/x.raw"), Some("/w/m"));
        for job in [
            "[g]\nfilename={disk}\n[j]\nfilename=/etc/passwd\n",
            "[g]\ndirectory=/root\n",
            "[g]\nfilename={dir}/../../etc/x\n",
            "[g]\nopendir=/w\n",
            "[g]\n$x=1\n",
            "[g]\nFileName = /dev/sda\n",
        ] {
            assert!(
                matches!(bounded_job(job, &t), Err(HostStepError::Refused(_))),
                "{job}"
            );
        }
    }

    #[test]
    fn bonnies_test_directory_becomes_the_mountpoint_and_no_other() {
        let t = target(None, Some("/w/m"));
        let args: Vec<String> = ["-d", TEST_MOUNTPOINT, "-s", "1024", "-u", "0:0"]
            .map(String::from)
            .to_vec();
        let got = bounded_bonnie_args(&args, &t).unwrap();
        assert_eq!(got[..2], ["-d".to_string(), "/w/m".to_string()]);
        assert_eq!(got[2..], args[2..]);
        let bad = ["-d", "/etc"].map(String::from).to_vec();
        assert!(matches!(
            bounded_bonnie_args(&bad, &t),
            Err(HostStepError::Refused(_))
        ));
    }

    #[test]
    fn only_whole_disk_filesystems_are_made_on_the_host() {
        let whole = Step::Mkfs {
            fs: Filesystem::Ext4,
            volume: Volume::Whole,
        };
        assert_eq!(
            layout_step(&whole).unwrap().unwrap(),
            LayoutStep::Mkfs(Filesystem::Ext4)
        );
        let lvm = Step::Mkfs {
            fs: Filesystem::Ext4,
            volume: Volume::Lvm,
        };
        assert!(layout_step(&lvm).unwrap().is_err());
        assert!(layout_step(&Step::DropCaches).is_none());
    }

    #[test]
    fn a_child_is_reaped_with_its_cpu_time_and_killed_when_interrupted() {
        let never = || false;
        let stop = Stop {
            cancelled: &never,
            deadline: Instant::now() + Duration::from_secs(30),
            memory: None,
        };
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo ok",
        ]);
        let done = run_child(cmd, "fio", &stop).unwrap();
        assert_eq!((done.code, done.stdout.trim()), (0, "ok"));
        assert!(
            done.cpu.user + done.cpu.sys > Duration::ZERO,
            "{:?}",
            done.cpu
        );
        let always = || true;
        let stop = Stop {
            cancelled: &always,
            deadline: Instant::now() + Duration::from_secs(30),
            memory: None,
        };
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let t = Instant::now();
        assert!(matches!(
            run_child(cmd, "fio", &stop),
            Err(HostStepError::Interrupted)
        ));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
