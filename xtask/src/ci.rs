//! `cargo xtask ci`: every check CI runs, each step timed.

use std::process::Command;
use std::time::Instant;

use xtask::schema::{self, Error};

/// The feature checks deny warnings through RUSTFLAGS, in a target folder of their own so that
/// the flag does not invalidate the main build.
const FEATURE_ENV: &[(&str, &str)] = &[
    ("RUSTFLAGS", "-D warnings"),
    ("CARGO_TARGET_DIR", "target/features"),
];

/// One CI step: a name, the cargo arguments, extra environment.
type Step<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);

/// Runs every step; stops at the first failure.
pub(crate) fn run() -> Result<(), Error> {
    let root = schema::project_root();
    let steps: &[Step<'_>] = &[
        ("fmt", &["fmt", "--all", "--", "--check"], &[]),
        (
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
            &[],
        ),
        ("test", &["test", "--workspace", "--all-features"], &[]),
        // Each version module alone, and none: the features must not depend on each other.
        (
            "features: none",
            &["check", "-p", "modelctx-types", "--no-default-features"],
            FEATURE_ENV,
        ),
        (
            "features: v2024-11-05",
            &[
                "check",
                "-p",
                "modelctx-types",
                "--no-default-features",
                "--features",
                "v2024-11-05",
            ],
            FEATURE_ENV,
        ),
        (
            "features: v2025-03-26",
            &[
                "check",
                "-p",
                "modelctx-types",
                "--no-default-features",
                "--features",
                "v2025-03-26",
            ],
            FEATURE_ENV,
        ),
        (
            "features: v2025-06-18",
            &[
                "check",
                "-p",
                "modelctx-types",
                "--no-default-features",
                "--features",
                "v2025-06-18",
            ],
            FEATURE_ENV,
        ),
        (
            "features: v2025-11-25",
            &[
                "check",
                "-p",
                "modelctx-types",
                "--no-default-features",
                "--features",
                "v2025-11-25",
            ],
            FEATURE_ENV,
        ),
        (
            "features: ext-tasks",
            &[
                "check",
                "-p",
                "modelctx-types",
                "--no-default-features",
                "--features",
                "ext-tasks",
            ],
            FEATURE_ENV,
        ),
        ("codegen --check", &["xtask", "codegen", "--check"], &[]),
        (
            "rustdoc",
            &["doc", "--workspace", "--no-deps", "--all-features"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        ),
    ];
    let started = Instant::now();
    let mut times = Vec::new();
    for (name, args, env) in steps {
        eprintln!("\n==> ci: {name}: cargo {}", args.join(" "));
        let t = Instant::now();
        let status = Command::new(env!("CARGO"))
            .args(*args)
            .envs(env.iter().copied())
            .current_dir(&root)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        let secs = t.elapsed().as_secs_f64();
        times.push((*name, secs));
        eprintln!(
            "==> ci: {name}: {} in {secs:.1}s",
            if status.success() { "ok" } else { "FAILED" }
        );
        if !status.success() {
            print_times(&times);
            return Err(format!("ci step `{name}` failed").into());
        }
    }
    print_times(&times);
    eprintln!(
        "==> ci: all steps passed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_times(times: &[(&str, f64)]) {
    eprintln!("\n==> ci: step times");
    for (name, secs) in times {
        eprintln!("    {name:<24} {secs:>8.1}s");
    }
}
