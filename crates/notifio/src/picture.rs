//! Which listing pictures may be shown: the dashboard's inbox, the e-mail and the channels
//! that pass a picture's URL on (Discord, Slack, Telegram, Matrix, ntfy) make the user's
//! browser or mail client fetch it. A page names its pictures, so a page could make the user's
//! own machine send requests into their network (`http://192.168.1.1/…`, a router's admin
//! page, `http://127.0.0.1:…` services). A picture is kept only when its host is a public name
//! or address, or is the host of the page itself, the site the user chose to watch (asking it
//! for a picture is no new exposure: the user's own loopback sites and the demo's keep theirs).
//! The rule is applied where listings come out of a page (`pages::judge`), so no private
//! picture is stored or sent anywhere, and again where the inbox shows stored listings (those
//! kept before the rule). docs/dashboard.md#pictures says it for users.

use notifio_policy::SiteKey;
use std::net::{Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// Whether the picture at `image` may be shown for a listing found on `site`: an http(s) URL
/// whose host is public ([`is_public`]) or on `site` itself.
#[must_use]
pub fn may_show(image: &str, site: &SiteKey) -> bool {
    let Ok(url) = Url::parse(image.trim()) else {
        return false;
    };
    matches!(url.scheme(), "http" | "https")
        && url
            .host()
            .is_some_and(|h| is_public(&h) || site.covers_url(&url))
}

/// Whether a host is on the public internet: a DNS name outside the names of a local network
/// (`localhost`, `.local`, `.internal`, `.lan`, `.home.arpa`, a name with no dot), or a
/// global IP address: not loopback, private, link-local, unique-local, CGNAT, multicast or
/// reserved, IPv4 in IPv6 judged as IPv4. The url crate has already read decimal, octal and
/// hexadecimal IPv4 spellings (`2130706433`, `0177.0.0.1`) as the addresses they are.
#[must_use]
pub fn is_public(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            let local = [
                "localhost",
                "local",
                "internal",
                "lan",
                "home.arpa",
                "localdomain",
            ]
            .iter()
            .any(|s| d == *s || d.ends_with(&format!(".{s}")));
            d.contains('.') && !local
        }
        Host::Ipv4(ip) => is_public_v4(*ip),
        Host::Ipv6(ip) => is_public_v6(*ip),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                  // "this network"
        || a == 10                            // private
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || a == 127                           // loopback
        || (a == 169 && b == 254)             // link-local
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)     // IETF protocol assignments
        || (a == 192 && b == 168)             // private
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // IPv4 carried in IPv6: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64
    // (64:ff9b::a.b.c.d) and 6to4 (2002:a.b.c.d::) reach the IPv4 address.
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    if s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return is_public_v4(v4(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(v4(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return is_public_v4(v4(s[1], s[2]));
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || s[..4] == [0x100, 0, 0, 0]) // discard-only 100::/64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(url: &str) -> bool {
        Url::parse(url)
            .unwrap()
            .host()
            .is_some_and(|h| is_public(&h))
    }

    #[test]
    fn public_names_and_addresses_are_public() {
        for url in [
            "https://img.idealista.com/a.jpg",
            "http://93.184.216.34/a.jpg",
            "http://8.8.8.8/",
            "http://[2606:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
            "http://[2002:0808:0808::1]/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
        ] {
            assert!(public(url), "{url}");
        }
    }

    #[test]
    fn the_users_own_network_is_not_public_in_any_spelling() {
        for url in [
            "http://127.0.0.1/",
            "http://127.0.0.2:8080/admin/reboot",
            "http://2130706434/", // 127.0.0.2 as a decimal number
            "http://0177.0.0.1/", // octal
            "http://0x7f.1/",     // hexadecimal, short form
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[::1]/",
            "http://[::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:2]/",
            "http://[::ffff:192.168.1.1]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::c0a8:101]/",
            "http://[2002:c0a8:0101::1]/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://[fe80::1]/",
            "http://[fec0::1]/",
            "http://[ff02::1]/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://app.localhost/",
            "http://printer.local/",
            "http://db.internal/",
            "http://nas.lan/",
            "http://router.home.arpa/",
            "http://router/",
        ] {
            assert!(!public(url), "{url}");
        }
    }

    #[test]
    fn a_picture_is_shown_when_public_or_on_the_watched_site_itself() {
        let public_site = SiteKey::from_url("https://www.idealista.com/alquiler/").unwrap();
        let own = SiteKey::from_url("http://127.0.0.1:8080/search").unwrap();
        assert!(may_show("https://img4.idealista.com/a.jpg", &public_site));
        assert!(may_show(" https://cdn.example.net/a.jpg ", &own));
        // The watched site's own host and port: the user's choice already.
        assert!(may_show("http://127.0.0.1:8080/img/1.jpg", &own));
        assert!(
            may_show("http://2130706433:8080/img/1.jpg", &own),
            "the same, spelt as a number"
        );
        for refused in [
            "http://127.0.0.1:9090/img/1.jpg", // another service on the same machine
            "http://127.0.0.2:8080/admin/reboot?from=img",
            "http://192.168.1.1/",
            "http://2130706434:8080/", // 127.0.0.2
            "data:image/png;base64,AAAA",
            "javascript:alert(1)",
            "/relative.jpg",
        ] {
            assert!(!may_show(refused, &own), "{refused}");
            assert!(!may_show(refused, &public_site), "{refused}");
        }
    }
}
