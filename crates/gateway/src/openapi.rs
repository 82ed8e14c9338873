//! `/openapi.json`: the claim API's description as shipped, and as a gateway serves it (the
//! configured source names). Built once at start, beside the state; the routes it describes are
//! the claim API's ([`crate::api::ROUTES`]).

use serde_json::json;

/// The OpenAPI description of the claim API, as shipped (any source name the pattern allows).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The description a gateway serves: [`OPENAPI`] with `SourceName` narrowed to the configured
/// `sources`, so that the document says exactly which names the server takes.
pub fn openapi<'a>(sources: impl IntoIterator<Item = &'a str>) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    let mut names: Vec<&str> = sources.into_iter().collect();
    names.sort_unstable();
    if !names.is_empty() {
        doc["components"]["schemas"]["SourceName"]["enum"] = json!(names);
    }
    doc.to_string()
}
