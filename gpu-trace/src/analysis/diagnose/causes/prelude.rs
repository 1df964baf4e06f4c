//! What every cause names: the facts it reads, the finding it returns, the
//! verdict it checks, and the words its fix is written in (shell words, and
//! the placeholders for names no quoting can show). Each cause takes them
//! with `use super::prelude::*` and imports only what is its own.

pub(super) use crate::{
    analysis::diagnose::{
        facts::{Context, Facts},
        phrasing::Finding,
    },
    model::access::Verdict,
    runtime::{CONTAINER, NODE_PATH},
    text::shell_word::{command_word, plain_or, prose},
};
