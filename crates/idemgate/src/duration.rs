//! Human durations (`90s`, `10m`, `3d`) in serde, for configuration: `#[serde(with = "human")]`.

/// A required duration.
pub mod human {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    /// # Errors
    /// A message naming the text and the expected form.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration {text:?}: {e} (expected a number and a unit, such as 90s, 10m, 4h or 3d)"
            ))
        })
    }
}

/// An optional duration (`Option<Duration>`, with `#[serde(default)]`).
pub mod human_opt {
    use std::time::Duration;

    use serde::Deserializer;

    /// # Errors
    /// As [`super::human::deserialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::human::deserialize(d).map(Some)
    }
}
