//! Idempotency keys for your own API: the `Idempotency-Key` request header of the IETF HTTPAPI
//! draft (draft-ietf-httpapi-idempotency-key-header), with the first response stored and given
//! back to every retry of the same key. The rules live here once; the tower layer and the
//! gateway's sidecar both apply them.
//!
//! - [`request`]: what a keyed request is made of: its [`IdempotencyKey`], the [`Route`] it
//!   matched, the [`Principal`] its keys belong to, its [`fingerprint`](request::fingerprint).
//! - [`rules`]: [`KeyRules`], which requests are keyed and how their keys are kept, and every
//!   answer of idemgate's own ([`Refusal`]).
//! - [`run`]: one keyed request from its claim to its answer ([`run::answer`]).
//! - [`IdempotencyKeyLayer`]: the rules around any tower service.

pub mod request;
pub mod rules;
pub mod run;

mod layer;

pub use layer::{IdempotencyKey as IdempotencyKeyService, IdempotencyKeyLayer};
pub use request::{
    HEADER, IdempotencyKey, KeyProblem, MAX_KEY_LEN, Principal, PrincipalProblem, REPLAYED, Route,
    RouteProblem,
};
pub use rules::{Admission, KeyRules, Keyed, Refusal, ReleaseOn, replay};
