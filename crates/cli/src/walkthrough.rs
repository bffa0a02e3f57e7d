//! `mcx demo` (not written yet).

use std::process::ExitCode;

pub(crate) async fn run() -> ExitCode {
    crate::fail("`mcx demo` is not written yet")
}
