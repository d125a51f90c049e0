//! Process-level errors and exit codes: 2 for bad input (nothing was started), 1 for a failed
//! run or a found regression, 130 for an interrupt.

/// Exit code for bad user input.
pub const EXIT_USAGE: i32 = 2;
/// Exit code after SIGINT/SIGTERM.
pub const EXIT_INTERRUPTED: i32 = 130;

/// An error that decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The user asked for something invalid; exit 2.
    #[error("{0}")]
    Usage(String),
    /// Anything else; exit 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Other(_) => 1,
        }
    }
}

impl From<crate::cell::UnknownValue> for CliError {
    fn from(e: crate::cell::UnknownValue) -> Self {
        CliError::Usage(e.to_string())
    }
}
