//! [`Secret`]: one signing secret as configured.

use std::fmt;

/// One signing secret, exactly as the provider shows it (Stripe's `whsec_...`, a GitHub webhook
/// secret, a Standard Webhooks `whsec_<base64>`). Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self(secret.into())
    }

    /// The secret's bytes, as configured.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl From<&[u8]> for Secret {
    fn from(s: &[u8]) -> Self {
        Self::new(s)
    }
}

impl From<Vec<u8>> for Secret {
    fn from(s: Vec<u8>) -> Self {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secret() {
        let shown = format!("{:?}", Secret::from("whsec_hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
