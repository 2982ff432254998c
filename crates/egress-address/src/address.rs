//! Reading a shard address out of IPAM's `status.allocatedCIDR`, failing closed on anything that
//! is not a plain IPv6 /128.

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

/// Parses an allocated CIDR into the shard address it holds.
///
/// `2607:ed40:70::1/128` → `2607:ed40:70::1`. Refused: no `/len` or garbage ("…which is not a
/// prefix"), IPv4 and IPv4-mapped IPv6 ("…read out of an IPv6 space"), any length but 128
/// ("…read out of a /128"). `Ipv6Addr`'s `Display` is RFC 5952, the same text Go's `netip` writes.
pub fn from_allocated_cidr(cidr: &str) -> Result<Ipv6Addr, UnusableError> {
    let not_a_prefix = || {
        UnusableError::new(
            cidr,
            format!("the address service answered with {cidr:?}, which is not a prefix"),
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
                    "the address service answered with {cidr:?}; a shard's IPv6 address is read out of an IPv6 space"
                ),
            ));
        }
    };
    if bits != ADDRESS_BITS {
        return Err(UnusableError::new(
            cidr,
            format!(
                "the address service answered with {cidr:?}; a shard's address is read out of a /128"
            ),
        ));
    }
    Ok(v6)
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
