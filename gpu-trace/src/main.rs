use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use gpu_trace::{
    cli::{Cli, Command},
    commands,
    host::preflight,
    model::exit_status,
    scenario, stream,
    text::terminal::escape,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.color.make_global();
    let passed = |ok: bool| {
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    };
    let result = match cli.command {
        Command::Watch(args) => commands::watch::run(*args).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => commands::run::run(args).map(ExitCode::from),
        // check promises scripts 0, 1, or 2 for any error.
        Command::Check(args) => Ok(commands::check::run(args).map_or_else(
            |error| {
                eprintln!("gpu-trace: error: {}", escape(&format!("{error:#}")));
                ExitCode::from(exit_status::USAGE_OR_CHECK_ERROR)
            },
            ExitCode::from,
        )),

        Command::Summary(args) => commands::summary::run(args).map(|()| ExitCode::SUCCESS),
        Command::Selftest(args) => commands::selftest::run(args).map(passed),
        Command::Probe { ops } => scenario::probe_main(&ops).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "gpu-trace",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
    };
    result.unwrap_or_else(|error| {
        // Errors can name cgroups and paths others chose.
        eprintln!("gpu-trace: error: {}", escape(&format!("{error:#}")));
        if error.chain().any(|e| e.is::<stream::sink::UnsafeOutput>()) {
            return ExitCode::from(exit_status::USAGE_OR_CHECK_ERROR);
        }
        let not_started = error.downcast_ref::<commands::run::CommandNotStarted>();
        ExitCode::from(not_started.map_or_else(|| preflight::exit_code_for(&error), |e| e.code))
    })
}
