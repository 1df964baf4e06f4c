//! Pasting a suggested command into a shell, safely: what a test needs to
//! prove that a name a tenant chose comes back as literal text. Each
//! command is run by bash with every program replaced by a printer (PATH
//! leads nowhere; bash's not-found handler prints the words), in an empty
//! directory that must stay empty.

/// The words bash makes of each backticked command in `hint` that mentions
/// `marker`, pasted as an admin would (with every command replaced by a
/// printer: PATH leads nowhere and bash's not-found handler prints the
/// words). Panics if pasting one ran anything or wrote a file.
pub fn pasted_words(hint: &str, marker: &str) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut pasted = Vec::new();
    for command in hint.split('`').skip(1).step_by(2) {
        if !command.contains(marker) {
            continue;
        }
        let script = format!(
            "command_not_found_handle() {{ printf '%s\\0' \"$@\"; printf '\\n'; }}\nPATH=/nonexistent\n{command}\n"
        );
        let out = std::process::Command::new("bash")
            .arg("--norc")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let words: Vec<String> = line
                .split('\0')
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect();
            pasted.push(words);
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read temp dir")
            .collect();
        assert!(left.is_empty(), "pasting `{command}` wrote files: {left:?}");
    }
    pasted
}

/// The word every hostile test name carries.
pub const MARKER: &str = "pwned";

/// Panics unless every command in `hint` that names `tenant` (marked by
/// `MARKER`) gets it as literal text when pasted into a shell. A name no
/// quoting can show (a backtick, a control character) must be a
/// placeholder instead.
pub fn assert_paste_safe(hint: &str, tenant: &str) {
    let pasted = pasted_words(hint, MARKER);
    if tenant.contains(['`', '\\', '!']) || tenant.chars().any(crate::text::terminal::needs_escape)
    {
        let placeholder = hint.contains("CONTAINER") || hint.contains("NODE_PATH");
        assert!(pasted.is_empty() && placeholder, "{hint}");
        return;
    }
    assert!(!pasted.is_empty(), "no command names {tenant:?}: {hint}");
    for words in &pasted {
        assert!(
            words.iter().any(|w| w.contains(tenant)),
            "pasting gave {words:?}, which lost {tenant:?} as literal text: {hint}"
        );
    }
}
