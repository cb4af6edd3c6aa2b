//! Enums whose values are words: a queue's name, an agent, a row's kind, an approval's state.
//! Each is stored as text, read from the command line and from JSON, and shown to people, so
//! one table per enum ([`words!`](crate::words!)) gives all of it: the serde name, `as_str`,
//! `ALL`, `Display`, `FromStr` (an unknown word is refused with the words it may be), `parse`
//! and the conversions of both databases. The words cannot drift apart between those places.

use crate::error::EngineError;

/// `a, b or c`: the words a refusal offers.
pub fn one_of(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The refusal of a word that is none of `words`.
pub fn unknown(what: &str, word: &str, words: &[&str]) -> EngineError {
    EngineError::Invalid(format!("unknown {what} '{word}': use {}", one_of(words)))
}

/// Declares an enum of words: `words! { pub enum Name("what it is") { Variant = "word", .. } }`.
/// It derives what every word enum has (a copyable value, compared, hashed, serialised as its
/// word); further derives go above `pub enum`.
#[macro_export]
macro_rules! words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $word)] $variant ),+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];
            /// Every word, in the order declared.
            pub const WORDS: [&'static str; [$($word),+].len()] = [$($word),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word ),+
                }
            }

            /// The value of `word`, if it is one.
            pub fn parse(word: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.as_str() == word)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::EngineError;
            fn from_str(word: &str) -> std::result::Result<Self, $crate::EngineError> {
                $name::parse(word).ok_or_else(|| $crate::words::unknown($what, word, &$name::WORDS))
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl postgres::types::ToSql for $name {
            fn to_sql(
                &self,
                ty: &postgres::types::Type,
                out: &mut bytes::BytesMut,
            ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
                self.as_str().to_sql(ty, out)
            }

            fn accepts(ty: &postgres::types::Type) -> bool {
                <&str as postgres::types::ToSql>::accepts(ty)
            }

            postgres::types::to_sql_checked!();
        }

        impl $crate::storage::sql::Column for $name {
            fn from_sqlite<I: $crate::storage::sql::Index>(
                row: &rusqlite::Row<'_>,
                at: I,
            ) -> $crate::Result<Self> {
                Ok(row.get(at)?)
            }

            fn from_postgres<I: $crate::storage::sql::Index>(
                row: &postgres::Row,
                at: I,
            ) -> $crate::Result<Self> {
                let word: String = row.try_get(at)?;
                word.parse()
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                let word = value.as_str()?;
                word.parse().map_err(|e: $crate::EngineError| {
                    rusqlite::types::FromSqlError::Other(e.into())
                })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_lists_the_words_as_a_person_would() {
        assert_eq!(one_of(&["a"]), "a");
        assert_eq!(one_of(&["a", "b"]), "a or b");
        assert_eq!(one_of(&["text", "voice", "file"]), "text, voice or file");
        let refused = "x".parse::<crate::QueueName>().unwrap_err().to_string();
        assert!(
            refused.contains("unknown queue 'x': use inbound, hooks or outbound"),
            "{refused}"
        );
    }
}
