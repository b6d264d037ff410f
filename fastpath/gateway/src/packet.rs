//! Where an IP packet from a pool's node goes: the one field of it the tunnel reads.

use std::net::IpAddr;

/// The destination of an IP packet, or `None` for anything that is not one.
pub fn destination(packet: &[u8]) -> Option<IpAddr> {
    match packet.first()? >> 4 {
        4 if packet.len() >= 20 => {
            let d: [u8; 4] = packet[16..20].try_into().ok()?;
            Some(IpAddr::from(d))
        }
        6 if packet.len() >= 40 => {
            let d: [u8; 16] = packet[24..40].try_into().ok()?;
            Some(IpAddr::from(d))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_reads_ip_packets_and_nothing_else() {
        let mut v4 = vec![0u8; 20];
        v4[0] = 0x45;
        v4[16..20].copy_from_slice(&[172, 31, 2, 9]);
        assert_eq!(destination(&v4), Some("172.31.2.9".parse().unwrap()));
        assert_eq!(destination(&v4[..19]), None);
        assert_eq!(destination(&[0x60; 39]), None);
        assert_eq!(destination(&[]), None);
        assert_eq!(destination(&[0x10; 60]), None);
    }
}
