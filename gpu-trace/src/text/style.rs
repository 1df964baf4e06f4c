//! Colour on a terminal, decided the way modern CLIs decide it (anstream):
//! `--color always|never`, else NO_COLOR off, CLICOLOR_FORCE on, else only
//! when the stream is a terminal that shows colour. Only words gpu-trace
//! chooses are coloured; tenant text inside a coloured part is escaped
//! first (`TerminalLines::parts`), so it can neither end nor forge a colour.

use anstream::{stream::RawStream, AutoStream, ColorChoice};
use anstyle::{AnsiColor, Style};

/// Whether lines written to `stream` get colour.
pub fn paints(stream: &impl RawStream) -> bool {
    AutoStream::choice(stream) != ColorChoice::Never
}

/// `--color`, for every command: recorded once, read by `paints`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// On a terminal that shows colour, unless NO_COLOR is set (CLICOLOR_FORCE forces it).
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorWhen {
    pub fn make_global(self) {
        match self {
            ColorWhen::Auto => ColorChoice::Auto,
            ColorWhen::Always => ColorChoice::Always,
            ColorWhen::Never => ColorChoice::Never,
        }
        .write_global();
    }
}

const fn bold(c: AnsiColor) -> Style {
    Style::new().bold().fg_color(Some(anstyle::Color::Ansi(c)))
}

pub const DENIED: Style = bold(AnsiColor::Red);
pub const FAILED: Style = bold(AnsiColor::Yellow);
pub const SUMMARY: Style = bold(AnsiColor::Magenta);
pub const ALLOWED: Style = bold(AnsiColor::Green);
pub const FIX: Style = bold(AnsiColor::Green);
pub const CAUSE: Style = bold(AnsiColor::Cyan);
