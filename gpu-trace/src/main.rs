use std::process::ExitCode;

use clap::Parser;
use gpu_trace::{
    cli::{Cli, Command},
    commands, preflight, scenario,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Watch(args) => commands::watch::run(args).map(|()| true),
        Command::Selftest => commands::selftest::run(),
        Command::Probe { ops } => scenario::probe_main(&ops).map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("gpu-trace: error: {error:#}");
            ExitCode::from(preflight::exit_code_for(&error))
        }
    }
}
