//! Built-in provider presets.
//!
//! Each preset carries the sender's longest documented retry window, the default margins, where
//! the dedup key lives, the signature scheme's name, and where the figure comes from with the date
//! it was checked. Provider numbers move: check the source before trusting a figure.

use std::time::Duration;

use crate::policy::DeliveryContract;

const MIN: u64 = 60;
const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

/// Defaults every preset starts from: a day of queue lag, ten minutes of clock skew.
const QUEUE_LAG: Duration = Duration::from_secs(DAY);
const CLOCK_SKEW: Duration = Duration::from_secs(10 * MIN);

/// One provider's delivery facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name used in config (`provider = "stripe"`).
    pub name: &'static str,
    /// The default delivery contract. `None` for `custom`, which must state its own window.
    pub contract: Option<DeliveryContract>,
    /// Where the retry-stable dedup key lives.
    pub dedup_key: &'static str,
    /// The signature scheme's name.
    pub signature: &'static str,
    /// Where the retry window figure comes from.
    pub source_url: &'static str,
    /// When the figure was last checked against its source.
    pub checked: &'static str,
    /// Anything a user must know about the figure.
    pub note: &'static str,
}

const fn contract(retry_window_s: u64, replay_margin_s: u64) -> Option<DeliveryContract> {
    Some(DeliveryContract {
        retry_window: Duration::from_secs(retry_window_s),
        queue_lag: QUEUE_LAG,
        clock_skew: CLOCK_SKEW,
        replay_margin: Duration::from_secs(replay_margin_s),
    })
}

const CHECKED: &str = "2026-11";

/// Every preset, in the order `idemgate providers` prints them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "stripe",
        // 3 days of automatic retries in live mode; the replay margin matches the window, so the
        // TTL is a little over 7 days.
        contract: contract(3 * DAY, 3 * DAY),
        dedup_key: "body: id (evt_...)",
        signature: "stripe (Stripe-Signature: t=..,v1=HMAC-SHA256 hex of t.body)",
        source_url: "https://docs.stripe.com/webhooks#retries",
        checked: CHECKED,
        note: "test mode retries 3 times over a few hours",
    },
    Preset {
        name: "github",
        // No automatic retry; manual redelivery for 3 days (GHES: 7 days, set retry_window).
        contract: contract(3 * DAY, 3 * DAY),
        dedup_key: "header: X-GitHub-Delivery, scoped by X-GitHub-Hook-ID",
        signature: "github (X-Hub-Signature-256: sha256=HMAC-SHA256 hex of body)",
        source_url: "https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks",
        checked: CHECKED,
        note: "manual redelivery only; GitHub Enterprise Server keeps 7 days",
    },
    Preset {
        name: "shopify",
        contract: contract(4 * HOUR, 2 * DAY),
        dedup_key: "header: X-Shopify-Webhook-Id",
        signature: "shopify (X-Shopify-Hmac-SHA256: base64 HMAC-SHA256 of body)",
        source_url: "https://shopify.dev/docs/apps/build/webhooks/troubleshooting-webhooks",
        checked: CHECKED,
        note: "8 tries over 4 hours since 2024-09; X-Shopify-Event-Id is shared across subscriptions",
    },
    Preset {
        name: "slack",
        contract: contract(5 * MIN, DAY),
        dedup_key: "body: event_id",
        signature: "slack (X-Slack-Signature: v0=HMAC-SHA256 hex of v0:ts:body)",
        source_url: "https://api.slack.com/apis/events-api#retries",
        checked: CHECKED,
        note: "window from a third-party source: 3 retries (now, 1 min, 5 min)",
    },
    Preset {
        name: "standard-webhooks",
        // The spec's example schedule spans about 75 hours.
        contract: contract(75 * HOUR, 3 * DAY),
        dedup_key: "header: webhook-id",
        signature: "standard-webhooks (webhook-signature: v1,base64 HMAC-SHA256 or v1a,base64 ed25519 of id.ts.body)",
        source_url: "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
        checked: CHECKED,
        note: "the spec's example schedule; a sender may use another",
    },
    Preset {
        name: "svix",
        // 0, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: about 27.6 hours.
        contract: contract(27 * HOUR + 36 * MIN, 2 * DAY),
        dedup_key: "header: svix-id",
        signature: "svix (svix-signature: v1,base64 HMAC-SHA256 or v1a,base64 ed25519 of id.ts.body)",
        source_url: "https://docs.svix.com/retries",
        checked: CHECKED,
        note: "manual replay at any time: keep late_duplicates on",
    },
    Preset {
        name: "paddle",
        contract: contract(3 * DAY, 3 * DAY),
        dedup_key: "body: event_id",
        signature: "paddle (Paddle-Signature: ts=..;h1=HMAC-SHA256 hex of ts:body)",
        source_url: "https://developer.paddle.com/webhooks/respond-to-webhooks",
        checked: CHECKED,
        note: "60 attempts over 3 days, plus manual replay",
    },
    Preset {
        name: "square",
        // Two versions of the docs say 24 h and 72 h: take the longer.
        contract: contract(3 * DAY, 2 * DAY),
        dedup_key: "body: event_id",
        signature: "square (x-square-hmacsha256-signature: base64 HMAC-SHA256 of signed_url+body; the legacy SHA-1 x-square-signature is not read)",
        source_url: "https://developer.squareup.com/docs/webhooks/overview",
        checked: CHECKED,
        note: "docs disagree (24 h or 72 h); the preset takes 72 h; set signed_url to the subscription's notification URL",
    },
    Preset {
        name: "twilio",
        contract: contract(15, DAY),
        dedup_key: "header: I-Twilio-Idempotency-Token (kept on Twilio's retries; or event_id_field, e.g. MessageSid)",
        signature: "twilio (X-Twilio-Signature: base64 HMAC-SHA1 of signed_url?query + sorted form params, or of the URL with bodySHA256 for JSON)",
        source_url: "https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides",
        checked: CHECKED,
        note: "retries within the 15 s request timeout only; no other id is documented as stable across retries",
    },
    Preset {
        name: "sendgrid",
        contract: contract(DAY, 2 * DAY),
        dedup_key: "body: sg_event_id of each event in the batch (one claim per event)",
        signature: "sendgrid (X-Twilio-Email-Event-Webhook-Signature: base64 ECDSA P-256/SHA-256 of timestamp+body)",
        source_url: "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook",
        checked: CHECKED,
        note: "retries for 24 hours",
    },
    Preset {
        name: "mailgun",
        // 5, 10, 15 min, 1, 2, 4 h: 8 hours.
        contract: contract(8 * HOUR, 2 * DAY),
        dedup_key: "body: signature.token (a retry resends it; a token seen again is a duplicate, with other event-data a conflict)",
        signature: "mailgun (HMAC-SHA256 hex of timestamp+token, in body; event-data is not signed)",
        source_url: "https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhooks",
        checked: CHECKED,
        note: "retries for 8 hours, resending the first attempt's signature block: the default tolerance is the retry window plus clock skew",
    },
    Preset {
        name: "postmark",
        contract: contract(10 * HOUR + 30 * MIN, 2 * DAY),
        dedup_key: "body, by RecordType: MessageID (inbound), Bounce:ID, Delivery:MessageID:Recipient, Open/Click:MessageID:Recipient:ReceivedAt",
        signature: "postmark (no signature: HTTP basic auth user:password from the webhook URL; allow_from for Postmark's addresses)",
        source_url: "https://postmarkapp.com/developer/webhooks/inbound-webhook",
        checked: CHECKED,
        note: "10 retries over about 10.5 hours; manual retry at any time; a 403 stops the retries",
    },
    Preset {
        name: "pubsub",
        // Until message retention: 7 days by default, 31 at most (set retry_window).
        contract: contract(7 * DAY, 3 * DAY),
        dedup_key: "body: message.messageId",
        signature: "pubsub (Authorization: Bearer OIDC JWT, RS256, checked against a JWKS: aud, iss, exp, email)",
        source_url: "https://cloud.google.com/pubsub/docs/push",
        checked: CHECKED,
        note: "retries until the subscription's message retention ends (default 7 d, max 31 d)",
    },
    Preset {
        name: "sns",
        contract: contract(HOUR, DAY),
        dedup_key: "body: MessageId",
        signature: "sns (SignatureVersion 1/2: RSA SHA1/SHA256 over the canonical fields, certificate from an allowed SigningCertURL host)",
        source_url: "https://docs.aws.amazon.com/sns/latest/dg/sns-message-delivery-retries.html",
        checked: CHECKED,
        note: "default policy retries about 1 minute; at most 1 hour",
    },
    Preset {
        name: "custom",
        contract: None,
        dedup_key: "configured per source",
        signature: "configured per source",
        source_url: "",
        checked: "",
        note: "set retry_window (and margins) in the source's config",
    },
];

/// Every preset.
pub fn presets() -> &'static [Preset] {
    PRESETS
}

/// The preset with this name.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TtlPolicy;

    #[test]
    fn stripe_ttl_is_at_least_seven_days() {
        let c = preset("stripe").unwrap().contract.unwrap();
        assert_eq!(c.retry_window, Duration::from_secs(3 * DAY));
        assert!(c.ttl() >= Duration::from_secs(7 * DAY), "{:?}", c.ttl());
    }

    #[test]
    fn every_preset_with_a_contract_passes_validation() {
        for p in PRESETS {
            if let Some(c) = p.contract {
                TtlPolicy::new(p.name, c, None).unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    !p.source_url.is_empty() && !p.checked.is_empty(),
                    "{}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn names_are_unique_and_include_the_required_set() {
        for name in [
            "stripe",
            "github",
            "shopify",
            "slack",
            "standard-webhooks",
            "svix",
            "paddle",
            "square",
            "twilio",
            "sendgrid",
            "mailgun",
            "postmark",
            "pubsub",
            "sns",
            "custom",
        ] {
            assert_eq!(
                PRESETS.iter().filter(|p| p.name == name).count(),
                1,
                "{name}"
            );
        }
    }
}
