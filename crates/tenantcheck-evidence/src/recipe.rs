//! Prompts recorded by reference: a long prompt the suite generated is written into
//! the transcript as its generator's inputs and the SHA-256 of the exact text sent,
//! and read back by running the generator again.
//!
//! A million-token prompt is about four megabytes of prose; a run at that context
//! sends a few dozen of them, and a transcript holding them in full is too big to mail.
//! Nothing about the prose needs keeping: it is drawn from a seed
//! ([`crate::prompt::PromptBuilder`]). What does need keeping is what the vendor was
//! sent, byte for byte, and that is what the digest pins: [`expand`] regenerates the
//! text, and a text whose digest differs is refused, so a changed seed, length or
//! placed record is as visible to `verify` as a changed byte of a prompt held in full.
//!
//! The mechanism, end to end:
//! - [`PromptBuilder::build`](crate::prompt::PromptBuilder::build) remembers the
//!   [`Recipe`] of every prompt of at least [`MIN_CHARS`] characters, by the digest of
//!   its text, in a small process-wide book (content-addressed, so runs in one process
//!   never see each other's entries as anything but the same text);
//! - the transcript writer hands each request body to [`by_reference`], which puts a
//!   [`Reference`] (`{"generated": {...}}`) in place of every string the book knows,
//!   or that starts with a text it knows and ends with at most [`MAX_AFTER`] bytes
//!   more (a cached prefix and the question after it), kept as `after`;
//! - the one transcript reader ([`crate::transcript::Line::parse`]) calls [`expand`],
//!   so that every consumer (`verify`, the re-checks, the renderers) sees the text as
//!   it was sent. Answers are never referenced: what the vendor sent back stays in full.
//!
//! Shorter prompts, and text the builder did not make (a pinned opening, a malformed
//! body), stay in full.

pub use crate::prompt::{MIN_CHARS, Recipe};
use serde::{Deserialize, Serialize};

/// The generator a [`Reference`] names: the prose of [`crate::prompt`] as this version
/// writes it. A change to that prose must change this name.
pub const GENERATOR: &str = "tenantcheck-prose/2";

/// The most bytes a referenced string may hold after its generated text.
pub const MAX_AFTER: usize = 4 * 1024;

/// What the transcript holds in place of a generated prompt: the generator, its
/// inputs, and the digest and length of the exact text sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// [`GENERATOR`] of the version that wrote it.
    pub generator: String,
    /// The inputs.
    pub recipe: Recipe,
    /// Text sent right after the generated text, in the same string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
    /// SHA-256 (hex) of the whole string sent (UTF-8): the generated text and `after`.
    pub sha256: String,
    /// Its length in bytes.
    pub bytes: usize,
}

/// The key a [`Reference`] sits under, in place of the string it stands for.
pub const KEY: &str = "generated";

/// The reference for `text`, where the book knows how it, or all of it but the last
/// [`MAX_AFTER`] bytes at most, was generated.
pub fn reference(text: &str) -> Option<Reference> {
    if text.len() < MIN_CHARS {
        return None;
    }
    let digest = crate::sha256_hex(text.as_bytes());
    let (recipe, len) = crate::prompt::recall(text, MAX_AFTER)?;
    Some(Reference {
        generator: GENERATOR.to_owned(),
        recipe,
        after: text[len..].to_owned(),
        sha256: digest,
        bytes: text.len(),
    })
}

/// `value` with every string the book knows replaced by `{"generated": Reference}`;
/// `None` where there is none (the common case of a short request).
pub fn by_reference(value: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let r = reference(s)?;
            let mut object = serde_json::Map::new();
            object.insert(KEY.to_owned(), serde_json::to_value(r).expect("a reference serialises"));
            Some(Value::Object(object))
        }
        Value::Array(items) => each_by_reference(items.iter()).map(Value::Array),
        Value::Object(map) => {
            each_by_reference(map.values()).map(|values| Value::Object(map.keys().cloned().zip(values).collect()))
        }
        _ => None,
    }
}

/// `values`, each by reference where it has one; `None` when none has (then nothing
/// is copied): the array and object cases of [`by_reference`].
fn each_by_reference<'v>(
    values: impl Iterator<Item = &'v serde_json::Value> + Clone,
) -> Option<Vec<serde_json::Value>> {
    let refs: Vec<Option<serde_json::Value>> = values.clone().map(by_reference).collect();
    if refs.iter().all(Option::is_none) {
        return None;
    }
    Some(values.zip(refs).map(|(v, r)| r.unwrap_or_else(|| v.clone())).collect())
}

/// Puts back, in place, the text of every reference in `value`: regenerated from its
/// recipe and checked against its digest and length. Fails on a generator this version
/// does not know and on a text that does not match (the recipe or the digest was
/// changed).
pub fn expand(value: &mut serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    match value {
        Value::Object(map) if map.len() == 1 && map.contains_key(KEY) => {
            let r: Reference = serde_json::from_value(map[KEY].clone())
                .map_err(|e| format!("a prompt recorded by reference does not read: {e}"))?;
            if r.generator != GENERATOR {
                return Err(format!(
                    "a prompt was recorded by reference to the generator {:?}; this version regenerates {GENERATOR:?} only",
                    r.generator
                ));
            }
            let mut text = r.recipe.text();
            text.push_str(&r.after);
            if text.len() != r.bytes || crate::sha256_hex(text.as_bytes()) != r.sha256 {
                return Err(format!(
                    "a prompt recorded by reference regenerates to {} bytes with another SHA-256 than the {} bytes sent (sha256 {}): its recipe or its digest was changed",
                    text.len(),
                    r.bytes,
                    r.sha256
                ));
            }
            *value = Value::String(text);
            Ok(())
        }
        Value::Object(map) => map.values_mut().try_for_each(expand),
        Value::Array(items) => items.iter_mut().try_for_each(expand),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{Filler, Placed, PromptBuilder};
    use serde_json::json;

    fn long_prompt(seed: u64) -> String {
        let placed = vec![Placed {
            depth: 1.0 / 3.0,
            text: "RECORD-ONE".into(),
        }];
        let filler = Filler {
            seed,
            marks: vec!["Alvarsson".into(), "Kettleby".into()],
        };
        PromptBuilder::default().build(5_000, &filler, "HEAD\n\n", &placed, "\n\nTAIL?")
    }

    #[test]
    fn a_generated_prompt_is_recorded_by_reference_and_read_back_byte_for_byte() {
        let text = long_prompt(11);
        let body = json!({"model": "m", "messages": [{"role": "system", "content": "short"}, {"role": "user", "content": text}]});
        let referenced = by_reference(&body).expect("the prompt is known");
        let line = serde_json::to_string(&referenced).unwrap();
        assert!(line.len() < 1_000, "{} bytes: {line}", line.len());
        assert_eq!(referenced["messages"][0]["content"], "short");
        let mut back: serde_json::Value = serde_json::from_str(&line).unwrap();
        expand(&mut back).unwrap();
        assert_eq!(back, body);
    }

    #[test]
    fn a_generated_prefix_is_referenced_with_the_text_after_it() {
        let text = format!("{}\n\nWhat comes next?", long_prompt(15));
        let referenced = by_reference(&json!({"content": text})).expect("the prefix is known");
        assert_eq!(referenced["content"][KEY]["after"], "\n\nWhat comes next?");
        let mut back = referenced.clone();
        expand(&mut back).unwrap();
        assert_eq!(back["content"], text.as_str());
        let mut changed = referenced;
        changed["content"][KEY]["after"] = json!("\n\nWhat came before?");
        assert!(expand(&mut changed).is_err());
    }

    #[test]
    fn text_the_builder_did_not_make_stays_in_full() {
        let mut text = long_prompt(12);
        text.insert(0, '!');
        assert!(by_reference(&json!({"messages": [{"content": text}]})).is_none());
        let far = format!("{}{}", long_prompt(12), "x".repeat(MAX_AFTER + 1));
        assert!(by_reference(&json!({"messages": [{"content": far}]})).is_none());
        assert!(by_reference(&json!({"messages": [{"content": "short"}]})).is_none());
    }

    #[test]
    fn a_changed_recipe_or_digest_or_generator_is_refused() {
        let text = long_prompt(13);
        let referenced = by_reference(&json!({"content": text})).unwrap();
        let changes: [(&str, serde_json::Value); 5] = [
            ("/content/generated/recipe/seed", json!(14)),
            ("/content/generated/recipe/chars", json!(text.len() + 1)),
            ("/content/generated/recipe/tail", json!("\n\nTAIL!")),
            ("/content/generated/sha256", json!("00".repeat(32))),
            ("/content/generated/generator", json!("tenantcheck-prose/0")),
        ];
        for (path, changed) in changes {
            let mut v = referenced.clone();
            *v.pointer_mut(path).unwrap() = changed;
            let e = expand(&mut v).unwrap_err();
            assert!(e.contains("recorded by reference"), "{path}: {e}");
        }
        let mut v = referenced.clone();
        expand(&mut v).unwrap();
        assert_eq!(v["content"], text.as_str());
    }
}
