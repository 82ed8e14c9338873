//! Webhook signature verification.
