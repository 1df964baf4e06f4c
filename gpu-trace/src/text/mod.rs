//! Text a tenant may have chosen, made safe for where it goes: a shell an
//! admin pastes into, a terminal, a JSON line. Pure functions, no I/O
//! beyond the writer handed in.

pub mod json;
pub mod shell_word;
pub mod terminal;
