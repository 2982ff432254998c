//! Reading a shard address out of IPAM's `status.allocatedCIDR`, failing closed on anything that
//! is not a public unicast IPv6 /128.
//!
//! The address is written once and then announced and cached by the world, so an address no
//! egress shard may carry must never reach a shard, whatever IPAM hands out: the IANA IPv6
//! special-purpose ranges, anything outside global unicast (`2000::/3`), and subnet-router
//! anycast addresses (an all-zero interface identifier). The documentation prefix `2001:db8::/32`
//! stays usable: the demo, the tests and the benchmarks run on it.

use std::net::{IpAddr, Ipv6Addr};

/// The prefix length claimed, and the only one accepted on read.
pub const ADDRESS_BITS: u8 = 128;

/// IPAM answered with something no shard address can be read from. Retrying reaches the same
/// allocation, so this waits on an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UnusableError {
    /// What IPAM answered, verbatim.
    pub answer: String,
    message: String,
}

impl UnusableError {
    fn new(answer: &str, message: String) -> Self {
        Self {
            answer: answer.to_string(),
            message,
        }
    }
}

/// Characters of an unusable answer an error quotes: a CIDR is at most 43, and an answer of any
/// length (up to the 1 MiB an IPAM body may be) must not become a log line or event of that size.
const QUOTED_CHARS: usize = 64;

/// `answer` quoted as Rust's `Debug` quotes it, cut after [`QUOTED_CHARS`] characters with its
/// length said.
fn quoted(answer: &str) -> String {
    match answer.char_indices().nth(QUOTED_CHARS) {
        None => format!("{answer:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &answer[..cut], answer.len()),
    }
}

/// Parses an allocated CIDR into the shard address it holds.
///
/// `2607:ed40:70::1/128` → `2607:ed40:70::1`. Refused: no `/len` or garbage ("…which is not a
/// prefix"), IPv4 and IPv4-mapped IPv6 ("…read out of an IPv6 space"), any length but 128
/// ("…read out of a /128"), and any address that is not public unicast ("…no egress shard may
/// carry it"). `Ipv6Addr`'s `Display` is RFC 5952, the same text Go's `netip` writes.
pub fn from_allocated_cidr(cidr: &str) -> Result<Ipv6Addr, UnusableError> {
    let v6 = host_address(cidr)?;
    if let Some(why) = not_public_unicast(v6) {
        return Err(UnusableError::new(
            cidr,
            format!(
                "the address service answered with {}, which is {why}; no egress shard may carry it",
                quoted(cidr)
            ),
        ));
    }
    Ok(v6)
}

/// The address an IPv6 /128 names, whatever range it is in (for comparing what a record holds
/// with what a shard carries).
pub fn host_address(cidr: &str) -> Result<Ipv6Addr, UnusableError> {
    let not_a_prefix = || {
        UnusableError::new(
            cidr,
            format!(
                "the address service answered with {}, which is not a prefix",
                quoted(cidr)
            ),
        )
    };
    let (addr, bits) = cidr.split_once('/').ok_or_else(not_a_prefix)?;
    let addr: IpAddr = addr.parse().map_err(|_| not_a_prefix())?;
    let bits: u8 = parse_bits(bits).ok_or_else(not_a_prefix)?;
    let max_bits = if addr.is_ipv4() { 32 } else { 128 };
    if bits > max_bits {
        return Err(not_a_prefix());
    }
    let v6 = match addr {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => v6,
        _ => {
            return Err(UnusableError::new(
                cidr,
                format!(
                    "the address service answered with {}; a shard's IPv6 address is read out of an IPv6 space",
                    quoted(cidr)
                ),
            ));
        }
    };
    if bits != ADDRESS_BITS {
        return Err(UnusableError::new(
            cidr,
            format!(
                "the address service answered with {}; a shard's address is read out of a /128",
                quoted(cidr)
            ),
        ));
    }
    Ok(v6)
}

/// Ranges inside global unicast that no egress shard may translate to, with what they are
/// (IANA IPv6 Special-Purpose Address Registry).
const SPECIAL_PURPOSE: &[(u128, u8, &str)] = &[
    // 2001::/23 holds Teredo, benchmarking, ORCHID, AMT, AS112 and the PCP/TURN anycasts.
    (
        0x2001_0000 << 96,
        23,
        "in 2001::/23 (IETF protocol assignments, Teredo 2001::/32 among them)",
    ),
    (0x2002 << 112, 16, "in 2002::/16 (6to4)"),
    (
        0x2620_004f_8000 << 80,
        48,
        "in 2620:4f:8000::/48 (AS112 direct delegation)",
    ),
    (0x3fff << 112, 20, "in 3fff::/20 (documentation)"),
];

/// Why `addr` is not an address an egress shard may carry, or `None` when it is.
pub fn not_public_unicast(addr: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(addr);
    let within =
        |net: u128, len: u8| bits >> (128 - u32::from(len)) == net >> (128 - u32::from(len));
    if bits == 0 {
        return Some("the unspecified address ::");
    }
    if bits == 1 {
        return Some("the loopback address ::1");
    }
    let outside_global = [
        (0u128, 96u8, "an IPv4-compatible address (::/96)"),
        (0xffff << 32, 96, "an IPv4-mapped address (::ffff:0:0/96)"),
        (0x64_ff9b << 96, 96, "in 64:ff9b::/96 (NAT64)"),
        (
            0x64_ff9b_0001 << 80,
            48,
            "in 64:ff9b:1::/48 (local-use IPv4/IPv6 translation)",
        ),
        (0x0100 << 112, 64, "in 100::/64 (discard-only)"),
        (0x5f00 << 112, 16, "in 5f00::/16 (SRv6 SIDs)"),
        (0xfc00 << 112, 7, "in fc00::/7 (unique local)"),
        (0xfe80 << 112, 10, "in fe80::/10 (link-local)"),
        (0xfec0 << 112, 10, "in fec0::/10 (site-local)"),
        (0xff00 << 112, 8, "in ff00::/8 (multicast)"),
    ];
    for (net, len, what) in outside_global {
        if within(net, len) {
            return Some(what);
        }
    }
    if !within(0x2000 << 112, 3) {
        return Some("outside global unicast (2000::/3)");
    }
    for &(net, len, what) in SPECIAL_PURPOSE {
        if within(net, len) {
            return Some(what);
        }
    }
    if bits & u128::from(u64::MAX) == 0 {
        return Some("a subnet-router anycast address (an all-zero interface identifier)");
    }
    None
}

/// Prefix lengths are plain decimal, without sign or leading zeros (as Go's `netip` reads them).
fn parse_bits(bits: &str) -> Option<u8> {
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return None;
    }
    bits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_prefix_reads_as_its_address() {
        assert_eq!(
            from_allocated_cidr("2607:ed40:70::1/128")
                .unwrap()
                .to_string(),
            "2607:ed40:70::1"
        );
    }

    #[test]
    fn output_is_rfc_5952() {
        let got = from_allocated_cidr("2607:ED40:0070:0000:0000:0000:0000:0001/128").unwrap();
        assert_eq!(got.to_string(), "2607:ed40:70::1");
        let got = from_allocated_cidr("2001:db8:0:0:1:0:0:1/128").unwrap();
        assert_eq!(got.to_string(), "2001:db8::1:0:0:1");
    }

    #[test]
    fn not_a_prefix() {
        for bad in [
            "",
            "2607:ed40:70::1",
            "garbage",
            "2607:ed40:70::1/",
            "2607:ed40:70::1/x",
            "2607:ed40:70::1/129",
            "2607:ed40:70::1/0128",
            "/128",
        ] {
            let err = from_allocated_cidr(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("the address service answered with {bad:?}, which is not a prefix")
            );
            assert_eq!(err.answer, bad);
        }
    }

    #[test]
    fn a_long_answer_is_quoted_cut_with_its_length() {
        // A fuzz finding: a 960,011-byte body read as a CIDR was repeated, escaped, in the
        // message, one allocation of 1.9 MB and a log line of that size.
        let long = format!("2607:ed40:70::1/{}", "9".repeat(1 << 20));
        let message = from_allocated_cidr(&long).unwrap_err().to_string();
        assert!(message.len() < 200, "{} bytes", message.len());
        assert!(
            message.contains(&format!("... ({} bytes)", long.len())),
            "{message}"
        );
        // Cut on a character boundary, whatever the answer holds.
        let wide = "é".repeat(100);
        let message = from_allocated_cidr(&wide).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{:?}...", "é".repeat(64))),
            "{message}"
        );
    }

    #[test]
    fn ipv4_and_ipv4_mapped_are_refused() {
        for bad in ["198.51.100.7/32", "::ffff:198.51.100.7/128"] {
            assert_eq!(
                from_allocated_cidr(bad).unwrap_err().to_string(),
                format!(
                    "the address service answered with {bad:?}; a shard's IPv6 address is read out of an IPv6 space"
                )
            );
        }
    }

    #[test]
    fn special_purpose_addresses_are_refused_by_name() {
        for (bad, why) in [
            ("::/128", "unspecified"),
            ("::1/128", "loopback"),
            ("::c000:201/128", "IPv4-compatible"),
            ("ff02::1/128", "multicast"),
            ("ff0e::1/128", "multicast"),
            ("fe80::1/128", "link-local"),
            ("febf:ffff::1/128", "link-local"),
            ("fd00::1/128", "unique local"),
            ("fc00::1/128", "unique local"),
            ("64:ff9b::c000:201/128", "NAT64"),
            ("64:ff9b:1::1/128", "translation"),
            ("2002:c000:201::1/128", "6to4"),
            ("2001::1/128", "Teredo"),
            ("2001:0:4136:e378::1/128", "Teredo"),
            ("2001:2::1/128", "2001::/23"),
            ("2001:1ff::1/128", "2001::/23"),
            ("100::1/128", "discard"),
            ("3fff::1/128", "documentation"),
            ("5f00::1/128", "SRv6"),
            ("2620:4f:8000::1/128", "AS112"),
            ("4000::1/128", "global unicast"),
            ("2607:ed40:70::/128", "subnet-router anycast"),
            ("2001:db8::/128", "subnet-router anycast"),
            ("2607:ed40:70:5::/128", "subnet-router anycast"),
        ] {
            let err = from_allocated_cidr(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("no egress shard may carry it"), "{bad}: {err}");
        }
    }

    #[test]
    fn public_unicast_and_the_documentation_prefix_are_usable() {
        for good in [
            "2607:ed40:70::1/128",
            "2607:ed40:70::1:0:0:0/128",
            "2001:db8::1/128",
            "2001:200::1/128",
            "2003::1/128",
            "2620:4f:8001::1/128",
            "3ffe::1/128",
            "2a00:1450::5/128",
        ] {
            assert!(from_allocated_cidr(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn only_a_128_is_accepted() {
        for bad in ["2607:ed40:70::/64", "2607:ed40:70::1/127", "::/0"] {
            assert_eq!(
                from_allocated_cidr(bad).unwrap_err().to_string(),
                format!(
                    "the address service answered with {bad:?}; a shard's address is read out of a /128"
                )
            );
        }
    }
}
