//! Counterexamples a person can read.
//!
//! A failed `always` property comes with a path of states and the actions
//! between them. [`Trace::from_path`] turns it into numbered steps, each the
//! action taken and the state fields it changed; [`Trace::render`] prints
//! them as `custos check` does, and the trace serialises as-is for `--json`.
//!
//! States are compared through their pretty `Debug` form: every model state
//! derives `Debug`, and no other common view of them exists. The form is
//! parsed back into its tree (one value per line, brackets nest), and the
//! two trees are compared place by place, so a change reads
//! `holders[1]: None → Some(Lease { owner: 1, fence: 1 })` rather than as a
//! run of changed lines. No maintained crate diffs `Debug` output by
//! structure (line diffs such as `similar`'s lose the place), so the small
//! parser is written here; it is total: any text parses to some tree.

use std::collections::BTreeMap;
use std::fmt::{Debug, Write as _};

use serde::Serialize;

/// The longest initial state `render` prints in full (the JSON has all of it).
const INITIAL_SHOWN: usize = 600;

/// A shortest counterexample to one property.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// The property the last state violates.
    pub property: String,
    /// The initial state, compact `Debug`.
    pub initial: String,
    /// The actions, in order; the state after the last one violates the
    /// property.
    pub steps: Vec<Step>,
}

/// One action of a trace and what it changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// 1-based position in the trace.
    pub number: usize,
    /// The action, `Debug`.
    pub action: String,
    /// The state fields it changed (empty: the state did not change).
    pub changes: Vec<Change>,
}

/// One changed place in the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Where in the state (`field.inner[2]`; empty for the whole state).
    pub path: String,
    /// The value before the action (`None`: the place did not exist).
    pub before: Option<String>,
    /// The value after the action (`None`: the place is gone).
    pub after: Option<String>,
}

impl Trace {
    /// The trace of `path` (each state with the action taken from it; the
    /// last state's action is `None`) as a counterexample to `property`.
    pub fn from_path<S: Debug, A: Debug>(property: &str, path: &[(S, Option<A>)]) -> Trace {
        let steps = path
            .windows(2)
            .enumerate()
            .filter_map(|(i, pair)| {
                let [(before, action), (after, _)] = pair else {
                    return None;
                };
                let action = action.as_ref()?;
                Some(Step {
                    number: i + 1,
                    action: format!("{action:?}"),
                    changes: changes(&format!("{before:#?}"), &format!("{after:#?}")),
                })
            })
            .collect();
        Trace {
            property: property.to_string(),
            initial: path
                .first()
                .map(|(s, _)| format!("{s:?}"))
                .unwrap_or_default(),
            steps,
        }
    }

    /// The trace as `custos check` prints it: the property, the initial
    /// state, then one numbered line per action with its changes under it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "counterexample to `{}` in {} steps:",
            self.property,
            self.steps.len()
        );
        let _ = writeln!(out, "   0. initial state: {}", shorten(&self.initial));
        for step in &self.steps {
            let _ = writeln!(out, "{:>4}. {}", step.number, step.action);
            if step.changes.is_empty() {
                let _ = writeln!(out, "        (no state change)");
            }
            for c in &step.changes {
                let place = if c.path.is_empty() { "state" } else { &c.path };
                let (before, after) = (c.before.as_deref().map(clip), c.after.as_deref().map(clip));
                let _ = match (&before, &after) {
                    (Some(b), Some(a)) => writeln!(out, "        {place}: {b} → {a}"),
                    (None, Some(a)) => writeln!(out, "        {place}: + {a}"),
                    (Some(b), None) => writeln!(out, "        {place}: − {b}"),
                    (None, None) => Ok(()),
                };
            }
        }
        let _ = writeln!(out, "        ⇒ `{}` no longer holds", self.property);
        out
    }
}

fn clip(s: &str) -> String {
    if s.len() <= VALUE_SHOWN {
        return s.to_string();
    }
    let mut end = VALUE_SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn shorten(s: &str) -> String {
    if s.len() <= INITIAL_SHOWN {
        return s.to_string();
    }
    let mut end = INITIAL_SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes; --json has it all)", &s[..end], s.len())
}

/// The longest value `render` prints for one change.
const VALUE_SHOWN: usize = 240;

/// One value of a pretty `Debug` rendering, parsed back into its shape.
#[derive(Debug, PartialEq)]
enum Node {
    /// A one-line value.
    Leaf(String),
    /// A bracketed value: its opener (`Lease {`, `[`, `Some(`), its closer
    /// and its children, each with its key when it has one.
    Group {
        open: String,
        close: char,
        children: Vec<(Option<String>, Node)>,
    },
}

impl Node {
    /// The value on one line, as compact `Debug` prints it.
    fn compact(&self) -> String {
        match self {
            Node::Leaf(s) => s.clone(),
            Node::Group {
                open,
                close,
                children,
            } => {
                let inner: Vec<String> = children
                    .iter()
                    .map(|(k, n)| match k {
                        Some(k) => format!("{k}: {}", n.compact()),
                        None => n.compact(),
                    })
                    .collect();
                if *close == '}' && open != "{" {
                    format!("{open} {} }}", inner.join(", "))
                } else {
                    format!("{open}{}{close}", inner.join(", "))
                }
            }
        }
    }
}

/// Parses the lines of one value; `lines` is left after its last line.
/// Answers the value and, when its closing line goes on as a map entry
/// (`): Operator` after a tuple key), the text after the `: `.
fn parse<'a>(first: &'a str, lines: &mut std::str::Lines<'a>) -> (Node, Option<&'a str>) {
    let Some(close) = opener(first) else {
        return (Node::Leaf(first.to_string()), None);
    };
    let mut children = Vec::new();
    // The children's own parse calls advance the same iterator.
    #[allow(clippy::while_let_on_iterator)]
    while let Some(raw) = lines.next() {
        let line = raw.trim().trim_end_matches(',');
        if let Some(rest) = closing(line) {
            let group = Node::Group {
                open: first.to_string(),
                close,
                children,
            };
            return (group, rest);
        }
        let (key, value) = split_key(line);
        match (key, parse(value, lines)) {
            // A map entry whose key is itself a group (a tuple, a struct):
            // the group was the key, the value follows its closer.
            (None, (group, Some(value))) => {
                let (value, _) = parse(value, lines);
                children.push((Some(group.compact()), value));
            }
            (key, (node, _)) => children.push((key.map(str::to_string), node)),
        }
    }
    let group = Node::Group {
        open: first.to_string(),
        close,
        children,
    };
    (group, None)
}

/// The closer of a line that opens a group, if it does.
fn opener(line: &str) -> Option<char> {
    match line.chars().last() {
        Some('{') => Some('}'),
        Some('[') => Some(']'),
        Some('(') => Some(')'),
        _ => None,
    }
}

/// Whether `line` closes a group: `None` if not, `Some(None)` for a bare
/// closer, `Some(Some(value))` for a closer that ends a map key
/// (`): value`).
fn closing(line: &str) -> Option<Option<&str>> {
    let mut chars = line.chars();
    if !matches!(chars.next(), Some('}' | ']' | ')')) {
        return None;
    }
    let rest = chars.as_str();
    if rest.is_empty() {
        Some(None)
    } else {
        rest.strip_prefix(": ").map(Some)
    }
}

/// The state of a pretty `Debug` rendering as a tree.
fn tree(pretty: &str) -> Node {
    let mut lines = pretty.lines();
    let first = lines.next().unwrap_or_default().trim();
    parse(first, &mut lines).0
}

/// The changes between two pretty `Debug` renderings, in the order of the
/// places in the state.
fn changes(before: &str, after: &str) -> Vec<Change> {
    let mut out = Vec::new();
    diff(String::new(), &tree(before), &tree(after), &mut out);
    out
}

/// The path of child `i` (key `key`) of `group` below `path`.
fn child_path(path: &str, group_open: &str, single: bool, key: &ChildKey) -> String {
    match key {
        ChildKey::Named(k) if is_plain(k) => {
            if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            }
        }
        ChildKey::Named(k) => format!("{path}[{k}]"),
        // `Some(x)`, `Ok(x)`: the wrapper is in the value, not the place.
        ChildKey::Position(_) if single && group_open.len() > 1 && group_open.ends_with('(') => {
            path.to_string()
        }
        ChildKey::Position(i) => format!("{path}[{i}]"),
    }
}

/// How a child is matched across the two sides.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ChildKey {
    Named(String),
    Position(usize),
}

fn keyed(children: &[(Option<String>, Node)]) -> Vec<(ChildKey, &Node)> {
    let mut position = 0;
    children
        .iter()
        .map(|(k, n)| match k {
            Some(k) => (ChildKey::Named(k.clone()), n),
            None => {
                position += 1;
                (ChildKey::Position(position - 1), n)
            }
        })
        .collect()
}

fn diff(path: String, a: &Node, b: &Node, out: &mut Vec<Change>) {
    if a == b {
        return;
    }
    match (a, b) {
        (
            Node::Group {
                open: oa,
                close: ca,
                children: xa,
            },
            Node::Group {
                open: ob,
                close: cb,
                children: xb,
            },
        ) if oa == ob && ca == cb => {
            let old = keyed(xa);
            let new = keyed(xb);
            let single = xa.len() == 1 && xb.len() == 1;
            let olds: BTreeMap<&ChildKey, &Node> = old.iter().map(|(k, n)| (k, *n)).collect();
            let news: BTreeMap<&ChildKey, &Node> = new.iter().map(|(k, n)| (k, *n)).collect();
            for (k, n) in &new {
                let p = child_path(&path, oa, single, k);
                match olds.get(k) {
                    Some(o) => diff(p, o, n, out),
                    None => out.push(Change {
                        path: p,
                        before: None,
                        after: Some(n.compact()),
                    }),
                }
            }
            for (k, o) in &old {
                if !news.contains_key(k) {
                    out.push(Change {
                        path: child_path(&path, oa, single, k),
                        before: Some(o.compact()),
                        after: None,
                    });
                }
            }
        }
        _ => out.push(Change {
            path,
            before: Some(a.compact()),
            after: Some(b.compact()),
        }),
    }
}

fn is_plain(key: &str) -> bool {
    key.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Whether `text` (before a `: `) is a key: a field name, a number, or a
/// map key written as one balanced word such as `Sha(6c02cf20…)`.
fn is_key(text: &str) -> bool {
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            c if c.is_whitespace() || c == ',' || c == '{' || c == '}' || c == ':' => return false,
            _ => {}
        }
    }
    depth == 0
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// Splits `name: value` (a struct field, or a map entry whose key is a
/// string, a number or one balanced word) into its key and value; a line
/// without a key (a list element, a type's opener) has none.
fn split_key(line: &str) -> (Option<&str>, &str) {
    let key_end = if line.starts_with('"') {
        // A string key: up to its closing quote (escapes skipped).
        let mut escaped = false;
        line.char_indices().skip(1).find_map(|(i, c)| match c {
            _ if escaped => {
                escaped = false;
                None
            }
            '\\' => {
                escaped = true;
                None
            }
            '"' => Some(i + 1),
            _ => None,
        })
    } else {
        line.find(": ")
            .filter(|&at| line.get(..at).is_some_and(is_key))
    };
    match key_end {
        Some(at) if at > 0 && line.get(at..).is_some_and(|r| r.starts_with(": ")) => {
            (line.get(..at), line.get(at + 2..).unwrap_or(""))
        }
        _ => (None, line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)] // read through Debug
    struct Lease {
        owner: u8,
        fence: u64,
    }

    #[derive(Debug)]
    #[allow(dead_code)] // read through Debug
    struct State {
        clock: u64,
        holders: Vec<Option<Lease>>,
    }

    #[test]
    fn a_step_names_the_places_it_changed() {
        let path = vec![
            (
                State {
                    clock: 0,
                    holders: vec![None, None],
                },
                Some("Acquire(1)"),
            ),
            (
                State {
                    clock: 0,
                    holders: vec![None, Some(Lease { owner: 1, fence: 1 })],
                },
                Some("Tick"),
            ),
            (
                State {
                    clock: 1,
                    holders: vec![None, Some(Lease { owner: 1, fence: 1 })],
                },
                None,
            ),
        ];
        let t = Trace::from_path("one holder", &path);
        assert_eq!(t.steps.len(), 2);
        assert_eq!(
            t.steps[0].changes,
            [Change {
                path: "holders[1]".into(),
                before: Some("None".into()),
                after: Some("Some(Lease { owner: 1, fence: 1 })".into()),
            }]
        );
        let tick = &t.steps[1].changes;
        assert_eq!(
            tick,
            &[Change {
                path: "clock".into(),
                before: Some("0".into()),
                after: Some("1".into()),
            }]
        );
        let text = t.render();
        assert!(text.contains("   1. \"Acquire(1)\""), "{text}");
        assert!(text.contains("        clock: 0 → 1"), "{text}");
        assert!(
            text.contains("holders[1]: None → Some(Lease { owner: 1, fence: 1 })"),
            "{text}"
        );
    }

    #[test]
    fn keys_are_fields_and_map_entries_not_text_with_a_colon() {
        assert_eq!(split_key("owner: 3"), (Some("owner"), "3"));
        assert_eq!(split_key("\"a\": 3"), (Some("\"a\""), "3"));
        assert_eq!(split_key("\"a: b\""), (None, "\"a: b\""));
        assert_eq!(split_key("Some(x: y)"), (None, "Some(x: y)"));
        assert_eq!(
            split_key("Sha(6c02…): Row {"),
            (Some("Sha(6c02…)"), "Row {")
        );
        assert_eq!(split_key("Some(x): y"), (Some("Some(x)"), "y"));
        assert_eq!(split_key("Some(x, y): z"), (None, "Some(x, y): z"));
    }

    #[test]
    fn the_compact_form_is_debug_s_own() {
        let s = State {
            clock: 3,
            holders: vec![Some(Lease { owner: 2, fence: 9 }), None],
        };
        assert_eq!(tree(&format!("{s:#?}")).compact(), format!("{s:?}"));
        let m: BTreeMap<&str, (u8, Vec<u8>)> =
            [("a", (1, vec![2, 3])), ("b: c", (4, vec![]))].into();
        assert_eq!(tree(&format!("{m:#?}")).compact(), format!("{m:?}"));
    }

    #[test]
    fn a_map_keyed_by_a_tuple_keeps_the_fields_after_it_in_place() {
        #[derive(Debug)]
        #[allow(dead_code)] // read through Debug
        struct S {
            members: BTreeMap<(&'static str, &'static str), u8>,
            now: u64,
        }
        let a = S {
            members: BTreeMap::new(),
            now: 0,
        };
        let b = S {
            members: [(("m1", "s0"), 1)].into(),
            now: 0,
        };
        let c = S {
            members: [(("m1", "s0"), 2)].into(),
            now: 1,
        };
        let shown = |x: &S, y: &S| -> Vec<(String, Option<String>, Option<String>)> {
            changes(&format!("{x:#?}"), &format!("{y:#?}"))
                .into_iter()
                .map(|c| (c.path, c.before, c.after))
                .collect()
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            shown(&a, &b),
            [("members".into(), s("{}"), s("{(\"m1\", \"s0\"): 1}"))]
        );
        assert_eq!(
            shown(&b, &c),
            [
                ("members[(\"m1\", \"s0\")]".into(), s("1"), s("2")),
                ("now".into(), s("0"), s("1")),
            ]
        );
    }

    #[test]
    fn map_entries_and_removals_have_their_own_places() {
        let a: BTreeMap<&str, u8> = [("x", 1), ("y", 2)].into();
        let b: BTreeMap<&str, u8> = [("x", 5), ("z", 3)].into();
        let c = changes(&format!("{a:#?}"), &format!("{b:#?}"));
        let shown: Vec<_> = c
            .iter()
            .map(|c| (c.path.as_str(), c.before.as_deref(), c.after.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                ("[\"x\"]", Some("1"), Some("5")),
                ("[\"z\"]", None, Some("3")),
                ("[\"y\"]", Some("2"), None),
            ]
        );
    }

    #[test]
    fn an_unchanged_step_has_no_changes_and_says_so() {
        let path = vec![(1u8, Some("Noop")), (1u8, None)];
        let t = Trace::from_path("p", &path);
        assert!(t.steps[0].changes.is_empty());
        assert!(t.render().contains("(no state change)"));
    }
}
