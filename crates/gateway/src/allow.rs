//! `allow_from`: the networks a source accepts deliveries from, as CIDR blocks, checked against
//! the connection's peer address before anything else is read.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One IPv4 or IPv6 network: `3.134.147.250/32`, `50.31.156.0/24`, `2600:1f18::/32`. A bare
/// address is its own /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in this network. An IPv4 address seen as IPv6 (`::ffff:a.b.c.d`, from a
    /// listener on `[::]`) is matched as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask32(self.prefix);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask128(self.prefix);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    /// # Errors
    /// What is wrong with the text, for a person.
    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IPv4 or IPv6 address or CIDR block"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
        };
        let cidr = Self { network, prefix };
        let host_bits = match network {
            IpAddr::V4(a) => u32::from(a) & !mask32(prefix) != 0,
            IpAddr::V6(a) => u128::from(a) & !mask128(prefix) != 0,
        };
        if host_bits {
            let base = match network {
                IpAddr::V4(a) => IpAddr::from((u32::from(a) & mask32(prefix)).to_be_bytes()),
                IpAddr::V6(a) => IpAddr::from((u128::from(a) & mask128(prefix)).to_be_bytes()),
            };
            return Err(format!(
                "{text:?} has address bits set past /{prefix}: write {base}/{prefix} for the network, or {addr}/{max} for the one address"
            ));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_contain_their_addresses_only() {
        let c: Cidr = "50.31.156.0/24".parse().unwrap();
        assert!(c.contains(ip("50.31.156.0")) && c.contains(ip("50.31.156.255")));
        assert!(!c.contains(ip("50.31.157.1")) && !c.contains(ip("::1")));
        // An IPv4 peer seen through an IPv6 listener.
        assert!(c.contains(ip("::ffff:50.31.156.7")));
        let one: Cidr = "3.134.147.250".parse().unwrap();
        assert_eq!(one.to_string(), "3.134.147.250/32");
        assert!(one.contains(ip("3.134.147.250")) && !one.contains(ip("3.134.147.251")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
        let all6: Cidr = "::/0".parse().unwrap();
        assert!(all6.contains(ip("2001:db8::1")));
        assert!("::1/128".parse::<Cidr>().unwrap().contains(ip("::1")));
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        let err = |s: &str| s.parse::<Cidr>().unwrap_err();
        assert!(err("50.31.156.0/33").contains("0 to 32"));
        assert!(err("::/129").contains("0 to 128"));
        assert!(err("50.31.156/24").contains("not an IPv4 or IPv6"));
        assert!(err("example.com").contains("not an IPv4 or IPv6"));
        assert_eq!(
            err("50.31.156.7/24"),
            "\"50.31.156.7/24\" has address bits set past /24: write 50.31.156.0/24 for the network, or 50.31.156.7/32 for the one address"
        );
        assert!(err("2001:db8::1/32").contains("write 2001:db8::/32"));
    }
}
