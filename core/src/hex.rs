//! Lowercase hex, the one spelling of every digest, name and token custos
//! writes as text (release digests, claim and credential digests, content
//! digests, page tokens). Encoding is the `hex` crate's (into a buffer,
//! which is several times faster than its character iterator); this module
//! adds the one rule the crate leaves open: a decoder accepts only the
//! canonical spelling — exactly `2 × N` characters, each `0-9` or `a-f` —
//! so that a value has one text and a text one value (an uppercase digit, a
//! sign or a space is refused, never normalized). The fixed-size decoder
//! maps the digits it has just checked itself: once every character is
//! known to be `0-9a-f`, a digit's value is one subtraction, and the
//! authentication probe decodes a digest on every call.

/// The lowercase hex of `bytes`.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    let mut out = vec![0u8; 2 * bytes.len()];
    // The buffer is exactly twice the input, which is all the crate asks.
    if hex::encode_to_slice(bytes, &mut out).is_err() {
        return hex::encode(bytes);
    }
    // Every byte written is an ASCII hex digit.
    String::from_utf8(out).unwrap_or_else(|_| hex::encode(bytes))
}

/// The value of a character already checked to be `0-9` or `a-f`.
fn digit(c: u8) -> u8 {
    if c <= b'9' {
        c - b'0'
    } else {
        c - b'a' + 10
    }
}

/// The `N` bytes `text` spells in lowercase hex; `None` unless `text` is
/// exactly `2 × N` characters of `0-9a-f`. Total; reads nothing past the
/// length check when the length is wrong.
pub fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N || !bytes.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        if let [hi, lo] = pair {
            *o = (digit(*hi) << 4) | digit(*lo);
        }
    }
    Some(out)
}

/// The bytes `text` spells in lowercase hex, at most `max` of them; `None`
/// unless `text` is an even number (at most `2 × max`) of `0-9a-f`
/// characters. The length is checked before anything is allocated.
pub fn decode_bounded(text: &str, max: usize) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 2 != 0
        || bytes.len() / 2 > max
        || !bytes.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    hex::decode(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_spelling_decodes() {
        assert_eq!(decode::<2>("00ff"), Some([0, 255]));
        assert_eq!(encode([0u8, 255]), "00ff");
        for bad in [
            "00FF", "+0ff", "0 ff", "00f", "00ff0", "", "0x0f", "\u{e9}ff",
        ] {
            assert_eq!(decode::<2>(bad), None, "{bad:?}");
        }
        assert_eq!(decode::<0>(""), Some([]));
        let all: Vec<u8> = (0..=255).collect();
        let text = encode(&all);
        assert_eq!(text, hex::encode(&all));
        assert_eq!(decode::<256>(&text).map(|b| b.to_vec()), Some(all));
        assert_eq!(decode_bounded("00ff", 2), Some(vec![0, 255]));
        assert_eq!(decode_bounded("", 2), Some(vec![]));
        for bad in ["00FF", "00f", "00ff00", "0x", " 0"] {
            assert_eq!(decode_bounded(bad, 2), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn decode_inverts_encode_and_nothing_else_decodes(b in proptest::array::uniform8(0u8..), t in "\\PC{0,20}") {
            proptest::prop_assert_eq!(decode::<8>(&encode(b)), Some(b));
            if let Some(v) = decode::<8>(&t) {
                proptest::prop_assert_eq!(encode(v), t);
            }
        }
    }
}
