//! [`PathParams`]: axum's `Path` extractor whose rejection is the gateway's own typed answer (a
//! problem with `Idemgate-Outcome: invalid_path`), so no layer has to recognise a rejection by
//! its text.

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::AppError;
use crate::outcome::Outcome;

/// The route's path parameters, as [`Path`] reads them.
#[derive(Debug)]
pub(crate) struct PathParams<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(params)) => Ok(Self(params)),
            // The path does not decode (not UTF-8, a value that does not parse): the client's,
            // as axum says with its 400.
            Err(e @ PathRejection::FailedToDeserializePathParams(_))
                if e.status() == axum::http::StatusCode::BAD_REQUEST =>
            {
                Err(AppError::BadRequest {
                    kind: Outcome::InvalidPath,
                    detail: e.body_text(),
                })
            }
            // A route whose parameters do not fit its handler (axum's 500): ours.
            Err(_) => Err(AppError::Internal {
                what: "a route's path parameters",
            }),
        }
    }
}
