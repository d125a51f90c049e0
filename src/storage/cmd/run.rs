//! Running a program with arguments (never a shell string) and quoting its errors and logs.

use super::super::StorageError;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// How many stderr/log lines an error quotes.
const TAIL_LINES: usize = 12;

/// Renders a program and its arguments for an error message (not for execution).
pub fn describe<S: AsRef<OsStr>>(program: &str, args: &[S]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

/// Runs `program args...`, returning its stdout; a non-zero exit becomes
/// [`StorageError::Command`] with the status and the tail of stderr.
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String, StorageError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StorageError::Io {
            context: format!("cannot run {program} (is it installed and on PATH?)"),
            source,
        })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    Err(StorageError::Command {
        command: describe(program, args),
        detail: format!("{}: {}", out.status, tail_text(&text, TAIL_LINES)),
    })
}

/// Runs a whole plan (one argv per step), stopping at the first failure.
pub fn run_plan(plan: &[Vec<String>]) -> Result<(), StorageError> {
    for step in plan {
        let (program, args) = step.split_first().ok_or_else(|| {
            StorageError::Invalid("internal: empty command in a plan".to_string())
        })?;
        run(program, args)?;
    }
    Ok(())
}

/// Whether `program` runs at all (found and executable), probed with `arg` (e.g. `--version`).
pub fn available(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The last `n` non-empty lines of `text`, joined with " | " so they fit in one error line.
pub fn tail_text(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join(" | ")
}

/// The last lines of a log file, or a note saying why it cannot be read.
pub fn tail_file(path: &Path) -> String {
    match std::fs::File::open(path) {
        Ok(f) => {
            let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
            tail_text(&lines.join("\n"), TAIL_LINES)
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_text("a\n\nb\nc\n", 2), "b | c");
    }

    #[test]
    #[ignore = "host: qemu"]
    fn failed_command_names_it_and_quotes_stderr() {
        let e = run("qemu-img", &["info", "/nonexistent/vmbench-x"]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("qemu-img info /nonexistent/vmbench-x failed"),
            "{s}"
        );
        assert!(s.contains("No such file"), "{s}");
    }
}
