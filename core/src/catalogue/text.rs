//! The catalogue's text rules: name grammars, display names, subtitles.

use super::CatalogueError;

/// The longest profile, executor or pool name, in characters (ASCII).
pub const PROFILE_NAME_LIMIT: usize = 32;
/// The longest `[models.<key>]` key, in bytes (the column's own bound).
pub const MODEL_KEY_LIMIT: usize = 64;
/// The longest registered workspace name, in bytes.
pub const WORKSPACE_NAME_LIMIT: usize = 128;
/// The longest local workspace path, in bytes.
pub const LOCAL_WORKSPACE_LIMIT: usize = 4096;
/// The longest display name, in bytes.
pub const DISPLAY_NAME_LIMIT: usize = 256;
/// The longest subtitle, in characters, the ellipsis included.
pub const SUBTITLE_LIMIT: usize = 60;
/// The longest session id, in bytes.
pub const SESSION_ID_LIMIT: usize = 128;
/// The longest creation key, in bytes.
pub const CREATION_KEY_LIMIT: usize = 128;

/// The profile grammar: a lowercase ASCII letter first, then lowercase
/// letters, digits, `_` and `-`, at most [`PROFILE_NAME_LIMIT`] characters.
/// Shared with the configuration file and the wire.
pub fn is_profile_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= PROFILE_NAME_LIMIT
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// The whole model-key grammar: 1 to [`MODEL_KEY_LIMIT`] bytes (a
/// `[models.<key>]` key is any TOML key).
pub fn is_model_key(s: &str) -> bool {
    !s.is_empty() && s.len() <= MODEL_KEY_LIMIT
}

/// A registered workspace name: 1 to [`WORKSPACE_NAME_LIMIT`] bytes, no `/`,
/// no NUL. It can never look like a local path.
pub fn is_workspace_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= WORKSPACE_NAME_LIMIT && !s.contains(['/', '\0'])
}

/// A local workspace: an absolute path on this host (starts with `/`), at
/// most [`LOCAL_WORKSPACE_LIMIT`] bytes, no NUL.
pub fn is_local_workspace(s: &str) -> bool {
    s.starts_with('/') && s.len() <= LOCAL_WORKSPACE_LIMIT && !s.contains('\0')
}

/// An executor name shares the profile grammar.
pub fn is_executor_name(s: &str) -> bool {
    is_profile_name(s)
}

/// A pool name shares the profile grammar.
pub fn is_pool_name(s: &str) -> bool {
    is_profile_name(s)
}

/// A session id: 1 to [`SESSION_ID_LIMIT`] bytes of ASCII letters, digits,
/// `.`, `_` and `-`.
pub fn is_session_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= SESSION_ID_LIMIT
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A creation (request) key: 1 to [`CREATION_KEY_LIMIT`] bytes, no control
/// characters.
pub fn is_creation_key(s: &str) -> bool {
    !s.is_empty() && s.len() <= CREATION_KEY_LIMIT && !s.chars().any(char::is_control)
}

/// A code point that changes text without showing: zero-width characters,
/// the direction-changing marks, embeddings, overrides and isolates, and the
/// other default-ignorable fillers. Shared with the access names.
pub fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// The rule for a display name about to be written: blank, over
/// [`DISPLAY_NAME_LIMIT`] bytes, a control character or an [`invisible`] code
/// point is `Invalid`. The accepted name is stored as given.
pub fn display_name(s: &str) -> Result<&str, CatalogueError> {
    let why = if s.trim().is_empty() {
        Some("blank")
    } else if s.len() > DISPLAY_NAME_LIMIT {
        Some("longer than 256 bytes")
    } else if s.chars().any(char::is_control) {
        Some("contains a control character")
    } else if s.chars().any(invisible) {
        Some("contains an invisible code point")
    } else {
        None
    };
    match why {
        Some(why) => Err(CatalogueError::Invalid {
            what: "display name",
            detail: why.to_owned(),
        }),
        None => Ok(s),
    }
}

/// Reduces a prompt to a subtitle: the first line that is not blank (after
/// controls and invisible code points are removed), whitespace runs collapsed
/// to one space and trimmed, cut to [`SUBTITLE_LIMIT`] characters on a word
/// boundary with an ellipsis (`…`) that counts towards the limit. `None` when
/// every line is blank.
pub fn subtitle_from_prompt(prompt: &str) -> Option<String> {
    let line = prompt
        .split(['\n', '\r'])
        .map(clean_line)
        .find(|l| !l.is_empty())?;
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SUBTITLE_LIMIT {
        return Some(line);
    }
    let room = SUBTITLE_LIMIT - 1; // the ellipsis counts
                                   // The last space at or before `room` ends the last whole word that fits.
    let cut = (1..=room).rev().find(|&i| chars[i] == ' ').unwrap_or(room);
    let mut out: String = chars[..cut].iter().collect();
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    Some(out)
}

fn clean_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut space = false;
    for c in line.chars() {
        if c.is_whitespace() {
            space = true;
        } else if c.is_control() || invisible(c) {
            continue;
        } else {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
    }
    out
}

/// Whether a stored subtitle obeys the rule (it is its own reduction). A
/// stored value that does not reads as no subtitle.
pub fn is_subtitle(s: &str) -> bool {
    subtitle_from_prompt(s).as_deref() == Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_grammar() {
        assert!(is_profile_name("a"));
        assert!(is_profile_name("fast_1-b"));
        assert!(is_profile_name(&"a".repeat(32)));
        for bad in ["", "A", "1a", "-a", "a b", "a.b", "é", &"a".repeat(33)] {
            assert!(!is_profile_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn workspace_split_cannot_overlap() {
        assert!(is_local_workspace("/home/x"));
        assert!(!is_workspace_name("/home/x"));
        assert!(is_workspace_name("proj"));
        assert!(!is_local_workspace("proj"));
        assert!(!is_workspace_name(""));
        assert!(!is_workspace_name("a\0"));
        assert!(!is_workspace_name(&"w".repeat(129)));
        assert!(is_model_key("any key. at all"));
        assert!(!is_model_key(&"k".repeat(65)));
    }

    #[test]
    fn display_names() {
        assert!(display_name("My session").is_ok());
        for bad in [
            "",
            "  ",
            "a\u{7}",
            "a\u{200B}b",
            "a\u{202E}b",
            &"n".repeat(257),
        ] {
            assert_eq!(
                display_name(bad).unwrap_err().reason(),
                "Invalid",
                "{bad:?}"
            );
        }
        assert!(display_name(&"n".repeat(256)).is_ok());
    }

    #[test]
    fn subtitles() {
        assert_eq!(
            subtitle_from_prompt("\n  \n  hello   world \nnext"),
            Some("hello world".into())
        );
        assert_eq!(
            subtitle_from_prompt("\u{200B}\u{200F}\n\tfix\u{202E} the\tbug"),
            Some("fix the bug".into())
        );
        assert_eq!(subtitle_from_prompt("  \n\u{200B}"), None);
        let long = "word ".repeat(30);
        let s = subtitle_from_prompt(&long).unwrap();
        assert!(s.chars().count() <= SUBTITLE_LIMIT, "{s}");
        assert!(s.ends_with("word…"), "{s}");
        assert_eq!(s.chars().count(), 60); // 12 words × 5 - 1 + the ellipsis
        let one = "x".repeat(100);
        let s = subtitle_from_prompt(&one).unwrap();
        assert_eq!(s.chars().count(), SUBTITLE_LIMIT);
        assert!(is_subtitle(&s));
        let exact = "y".repeat(60);
        assert_eq!(subtitle_from_prompt(&exact), Some(exact.clone()));
        assert!(!is_subtitle(" padded"));
        assert!(!is_subtitle(&"z".repeat(61)));
    }
}
