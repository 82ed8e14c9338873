//! Who may open the dashboard.
//!
//! - A request presenting a token, as `Authorization: Bearer <token>` or in the cookie
//!   [`COOKIE`], is let in from any peer when the token is `dashboard_token` or one of
//!   `api_tokens` (compared in constant time), and refused (403) otherwise.
//! - A request presenting none is let in only from a loopback peer, and only while
//!   `dashboard_token` is not set: setting it means "a token, from everyone" (a reverse proxy on
//!   the same host would otherwise open the dashboard to whoever reaches the proxy).
//! - `?token=...` on any dashboard page checks the token, keeps it in the cookie (`HttpOnly`,
//!   `SameSite=Strict`, path `/dashboard`) and redirects to the same page without it, so that a
//!   browser can open the dashboard and the token stays out of its history.
//!
//! A refusal is a 403 problem whose detail says why and what would be let in.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::config::Scope;
use crate::config::token::{digest, digests_equal};
use crate::error::Problem;
use crate::outcome::Outcome;

/// The cookie `?token=` sets.
pub(crate) const COOKIE: &str = "idemgate_dashboard";

/// `None` when the request may see the dashboard; else the answer to send instead (a refusal,
/// or the redirect that keeps a `?token=` in the cookie).
pub(crate) fn check(
    state: &AppState,
    req: &Request,
    query_token: Option<&str>,
) -> Option<Response> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    if let Some(token) = query_token {
        if !valid(state, token) {
            return Some(refuse(
                "the token in ?token= is neither dashboard_token nor one of api_tokens with the dashboard scope".to_owned(),
            ));
        }
        return Some(keep_in_cookie(req, token));
    }
    match presented(req) {
        Some(token) if valid(state, token) => None,
        Some(_) => Some(refuse(
            "the token presented (bearer header or cookie) is neither dashboard_token nor one of api_tokens with the dashboard scope".to_owned(),
        )),
        None if state.dashboard.token.is_some() => Some(refuse(
            "dashboard_token is set: present it as Authorization: Bearer <token>, or open /dashboard?token=<token> once in a browser".to_owned(),
        )),
        None if peer.is_some_and(is_loopback) => None,
        None => Some(refuse(match peer {
            Some(ip) => format!(
                "without a token the dashboard answers loopback peers only, not {ip}: set dashboard_token and present it (bearer header, or ?token= once in a browser)"
            ),
            None => "without a token the dashboard answers loopback peers only, and this connection's address is not known".to_owned(),
        })),
    }
}

fn valid(state: &AppState, token: &str) -> bool {
    let dashboard = state
        .dashboard
        .token
        .as_ref()
        .is_some_and(|t| digests_equal(t, &digest(token)));
    // Both checks always run, so the time taken does not tell which token matched.
    let api = state.is_api_token(token, Scope::Dashboard);
    dashboard | api
}

/// The token a request presents: its bearer header, else its dashboard cookie.
fn presented(req: &Request) -> Option<&str> {
    let headers = req.headers();
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer);
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// IPv4 and IPv6 loopback, an IPv4 loopback peer seen through an IPv6 listener included.
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `303` to the same path without the query, setting the cookie.
fn keep_in_cookie(req: &Request, token: &str) -> Response {
    let path = req.uri().path();
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(path) {
        headers.insert(header::LOCATION, location);
    }
    // A token with characters a cookie cannot carry is refused by HeaderValue; the redirect
    // then leads to the refusal that says a token is needed. Over HTTPS (a proxy in front that
    // terminates TLS says so), the cookie travels over HTTPS only.
    let secure = if over_https(req) { "; Secure" } else { "" };
    if let Ok(cookie) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/dashboard; HttpOnly; SameSite=Strict{secure}"
    )) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Outcome::Dashboard.on(response)
}

/// Whether the request came over HTTPS, as a proxy that terminated TLS says: `X-Forwarded-Proto:
/// https` or `Forwarded: proto=https` (RFC 7239). (The gateway itself serves plain HTTP.) Taken
/// from any client: a wrong claim only keeps the cookie off plain HTTP.
fn over_https(req: &Request) -> bool {
    let headers = req.headers();
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
        });
    let forwarded = headers
        .get_all(header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([';', ',']))
        .any(|pair| {
            pair.trim().split_once('=').is_some_and(|(k, v)| {
                k.eq_ignore_ascii_case("proto") && v.trim_matches('"').eq_ignore_ascii_case("https")
            })
        });
    forwarded_proto || forwarded
}

fn refuse(why: String) -> Response {
    Problem::new(StatusCode::FORBIDDEN, Outcome::DashboardForbidden, why)
        .into_response_with(Outcome::DashboardForbidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_in_every_spelling() {
        for ip in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "::ffff:10.0.0.1", "192.168.1.1", "fe80::1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }
}
