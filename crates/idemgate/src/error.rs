//! Errors shown whole.

/// Displays an error with its sources: `a: b: c`. A source whose words the error already said
/// (many errors repeat their source in their own message) is left out, so nothing reads twice.
#[derive(Debug)]
pub struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = self.0.to_string();
        let mut source = self.0.source();
        while let Some(s) = source {
            let words = s.to_string();
            if !said.contains(&words) {
                said.push_str(": ");
                said.push_str(&words);
            }
            source = s.source();
        }
        f.write_str(&said)
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorChain;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn sources_are_chained_and_a_repeated_one_is_said_once() {
        let chain = E("a", Some(Box::new(E("b", Some(Box::new(E("c", None)))))));
        assert_eq!(ErrorChain(&chain).to_string(), "a: b: c");
        let repeated = E(
            "IO error: refused",
            Some(Box::new(E("refused", Some(Box::new(E("os", None)))))),
        );
        assert_eq!(ErrorChain(&repeated).to_string(), "IO error: refused: os");
    }
}
