//! What a verified delivery yields: [`Verified`], its batch's [`BatchEvent`]s, and the
//! [`Control`] messages addressed to the receiver itself.

use std::time::SystemTime;

use idemgate_core::EventId;

/// What a verified delivery yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's event id, validated. For a batch, the first event's that has a usable one.
    pub event_id: EventId,
    /// The signed timestamp, for schemes that sign one.
    pub signed_at: Option<SystemTime>,
    /// For schemes whose delivery is a batch of events ([`Scheme::is_batch`](crate::Scheme::is_batch): SendGrid), every
    /// event in order, each to be claimed on its own; `None` for a delivery of one event.
    pub batch: Option<Vec<BatchEvent>>,
    /// A verified message for the receiver itself rather than an event (SNS's subscription
    /// handshake); `None` for an event.
    pub control: Option<Control>,
}

/// One event of a batch delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEvent {
    /// Its position in the batch, from 0.
    pub index: usize,
    /// Its own bytes (a JSON object) within the delivery's body.
    pub span: std::ops::Range<usize>,
    /// Its id, or why it has none usable (absent, not a string, refused as an
    /// [`EventId`]). The signature covers the whole batch, so such an event is authentic but
    /// cannot be deduplicated.
    pub id: Result<EventId, String>,
}

/// A verified message addressed to the receiver, not an event to pass on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control {
    /// SNS `SubscriptionConfirmation`: visiting `subscribe_url` (already checked against the
    /// source's allowed hosts) confirms the subscription to `topic_arn`.
    SnsSubscription {
        subscribe_url: String,
        topic_arn: String,
    },
    /// SNS `UnsubscribeConfirmation`: the subscription to `topic_arn` was deleted.
    SnsUnsubscribed { topic_arn: String },
}
