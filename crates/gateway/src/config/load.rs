//! Reading the configuration: the file (or the fallback text), then `IDEMGATE_*` environment
//! variables, through figment; and locating an error at its key's line in the file.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml};

use super::{Config, ConfigError, NOT_CONFIG, report};

impl Config {
    /// Reads `file` (or, without one, the TOML text `fallback`), then `IDEMGATE_*` environment
    /// variables (nested keys with `__`: `IDEMGATE_STORE__KIND=postgres`), and validates the
    /// result.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key at fault.
    pub fn load(file: Option<&Path>, fallback: &str) -> Result<Self, ConfigError> {
        let figment = match file {
            Some(file) if !file.exists() => {
                return Err(ConfigError::Global {
                    key: "--config",
                    why: format!("{} does not exist", file.display()),
                });
            }
            Some(file) => Figment::from(Toml::file_exact(file)),
            None => Figment::from(Toml::string(fallback)),
        };
        Self::from_figment(Self::figment(figment), file)
    }

    /// Whether `file` (with the `IDEMGATE_STORE__*` environment) names a store itself, with a
    /// `[store]` table: tools then refuse a flag that names another one.
    pub fn names_store(file: &Path) -> bool {
        let env_store = std::env::vars().any(|(k, _)| k.starts_with("IDEMGATE_STORE__"));
        env_store
            || Figment::from(Toml::file_exact(file))
                .find_value("store")
                .is_ok()
    }

    /// Parses and validates a TOML text (tests, embedded defaults).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_figment(Figment::from(Toml::string(text)), None)
    }

    fn from_figment(figment: Figment, file: Option<&Path>) -> Result<Self, ConfigError> {
        let config = Self::extract(&figment)?;
        let mut problems: Vec<ConfigError> = config
            .problems()
            .into_iter()
            .map(|e| config.locate_in(e, file, Some(&figment)))
            .collect();
        match problems.len() {
            0 => Ok(config),
            1 => Err(problems.remove(0)),
            _ => Err(ConfigError::Many(problems)),
        }
    }

    fn extract(figment: &Figment) -> Result<Self, ConfigError> {
        let mut config: Self =
            report::extract_all(figment).map_err(|errors| ConfigError::Parse(errors.join("\n")))?;
        config.store.history_archived = config.history.archive.is_some();
        Ok(config)
    }

    /// Reads `file` (and the environment) as [`Config::load`] does, but without validating:
    /// for `idemgate check`, which lists every [`Config::problems`] at once.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] when the file does not deserialize.
    pub fn parse(file: &Path) -> Result<Self, ConfigError> {
        Self::parse_checked(file).map(|(config, _)| config)
    }

    /// [`Config::parse`], with every problem [`Config::validate`] would refuse, each located
    /// where its key was written: the file's line, or the environment variable that set it.
    ///
    /// # Errors
    /// As [`Config::parse`].
    pub fn parse_checked(file: &Path) -> Result<(Self, Vec<ConfigError>), ConfigError> {
        if !file.exists() {
            return Err(ConfigError::Global {
                key: "--config",
                why: format!("{} does not exist", file.display()),
            });
        }
        let figment = Self::figment(Figment::from(Toml::file_exact(file)));
        let config = Self::extract(&figment)?;
        let problems = config
            .problems()
            .into_iter()
            .map(|e| config.locate_in(e, Some(file), Some(&figment)))
            .collect();
        Ok((config, problems))
    }

    fn figment(base: Figment) -> Figment {
        base.merge(
            Env::prefixed("IDEMGATE_")
                .ignore(NOT_CONFIG)
                .split("__")
                .lowercase(true),
        )
    }

    /// `error`, with the file and line where its key is written (for a key that is missing,
    /// where its table is), when that can be told.
    pub fn locate(&self, error: ConfigError, file: Option<&Path>) -> ConfigError {
        self.locate_in(error, file, None)
    }

    /// As [`Config::locate`]; with the `figment` the config came from, a value set by an
    /// environment variable is located there, by the variable's name.
    fn locate_in(
        &self,
        error: ConfigError,
        file: Option<&Path>,
        figment: Option<&Figment>,
    ) -> ConfigError {
        if let (Some(figment), Some(key)) = (figment, self.key_of(&error))
            && report::metadata_at(figment, &key).is_some_and(|m| m.name.contains("environment"))
        {
            return ConfigError::Env {
                variable: report::env_name(&key),
                error: Box::new(error),
            };
        }
        let at = file.and_then(|f| {
            let key = self.key_of(&error)?;
            let line =
                report::line_of(f, &key).or_else(|| report::line_of(f, key.split_last()?.1))?;
            Some((f.display().to_string(), line))
        });
        match at {
            Some((file, line)) => ConfigError::At {
                file,
                line,
                error: Box::new(error),
            },
            None => error,
        }
    }

    /// The path of the key a validation error is about (`["source", "2", "lease"]`).
    fn key_of(&self, error: &ConfigError) -> Option<Vec<String>> {
        let source = |name: &str, key: &str| {
            let index = self.sources.iter().position(|s| s.name == name)?;
            let mut path = vec!["source".to_owned(), index.to_string()];
            path.extend(key.split('.').map(str::to_owned));
            Some(path)
        };
        match error {
            ConfigError::SourceName { index, .. } => Some(vec![
                "source".to_owned(),
                index.to_string(),
                "name".to_owned(),
            ]),
            ConfigError::DuplicateSource { name } => {
                let index = self.sources.iter().rposition(|s| &s.name == name)?;
                Some(vec![
                    "source".to_owned(),
                    index.to_string(),
                    "name".to_owned(),
                ])
            }
            ConfigError::UnknownProvider { name, .. } => source(name, "provider"),
            ConfigError::ReasonWithoutOverride { name } => source(name, "ttl_override_reason"),
            ConfigError::Invalid { name, key, .. } => source(name, key),
            ConfigError::Global { key, .. } => Some(key.split('.').map(str::to_owned).collect()),
            ConfigError::Api { name, key, .. } => {
                let index = self.apis.iter().position(|a| &a.name == name)?;
                Some(vec!["api".to_owned(), index.to_string(), (*key).to_owned()])
            }
            ConfigError::Policy(_)
            | ConfigError::Parse(_)
            | ConfigError::At { .. }
            | ConfigError::Env { .. }
            | ConfigError::Many(_) => None,
        }
    }
}
