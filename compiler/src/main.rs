//! The `lms` command line ([`lms_compiler::commands::cli`]).

fn main() -> std::process::ExitCode {
    lms_compiler::commands::cli::main()
}
