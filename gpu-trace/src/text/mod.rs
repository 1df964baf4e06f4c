//! Text a tenant may have chosen, made safe for where it goes: a shell an
//! admin pastes into, a terminal, a JSON line; and the colours gpu-trace
//! adds around it on a terminal. Pure functions, no I/O beyond the writer
//! handed in.

pub mod json;
pub mod shell_word;
pub mod style;
pub mod terminal;
