//! String bindings: where a server listens and where an object lives.
//!
//! | form | meaning |
//! |---|---|
//! | `tcp://127.0.0.1:7000` | TCP endpoint (host may be a name, an IPv4 or a bracketed IPv6 address) |
//! | `unix:///tmp/app.sock` | Unix domain socket at that path |
//! | `shm://name` | shared memory between processes on this host, set up through the abstract Unix socket `@lanner-shm/name` |
//! | `mem://name` | in-process endpoint, for tests and embedding |
//!
//! An object URL appends the object's published name: `tcp://127.0.0.1:7000/calc`,
//! `unix:///tmp/app.sock/calc` (the last path segment is the name: a `/` in it is written
//! `%2F`, a `%` `%25`), `shm://name/calc`,
//! `mem://name/calc`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, ErrorKind};

/// Where a server listens or a client connects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A TCP address, `host:port`.
    Tcp(String),
    /// A Unix domain socket path.
    Unix(PathBuf),
    /// A shared-memory endpoint name on this host.
    Shm(String),
    /// An in-process endpoint name.
    Mem(String),
}

fn invalid(url: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("invalid Lanner URL {url:?}: {why}"),
    )
}

/// Splits `scheme://rest`. Refuses control characters anywhere: no endpoint or name
/// needs them, and a URL a peer hands over (a reference to a third party's object) ends
/// up in logs and error messages, where a newline or an escape sequence would forge or
/// hide lines.
fn split_scheme(url: &str) -> Result<(&str, &str), Error> {
    if url.chars().any(char::is_control) {
        return Err(invalid(url, "control characters are not allowed"));
    }
    url.split_once("://")
        .ok_or_else(|| invalid(url, "expected scheme://… (tcp, unix, shm or mem)"))
}

impl Endpoint {
    /// Parses an endpoint URL (no object name).
    pub fn parse(url: &str) -> Result<Endpoint, Error> {
        Endpoint::parse_reporting(url, url)
    }

    /// Parses `endpoint`, naming `url` (what the user wrote) in error messages.
    fn parse_reporting(endpoint: &str, url: &str) -> Result<Endpoint, Error> {
        let (scheme, rest) = split_scheme(endpoint)?;
        let rest = rest.trim_end_matches('/');
        let endpoint = match scheme {
            "tcp" => Endpoint::Tcp(parse_authority(url, rest)?),
            "unix" => {
                if !rest.starts_with('/') || rest.len() < 2 {
                    return Err(invalid(
                        url,
                        "a unix URL needs an absolute path: unix:///path",
                    ));
                }
                // One spelling per path: a path that climbs (`..`) or names `.` could pass a
                // check of its prefix (a hand-off filter, say) and lead elsewhere.
                if rest.split('/').any(|part| part == ".." || part == ".") {
                    return Err(invalid(
                        url,
                        "a unix URL's path may not contain `.` or `..` components",
                    ));
                }
                Endpoint::Unix(PathBuf::from(rest))
            }
            "shm" => Endpoint::Shm(parse_name(url, rest, "shm")?),
            "mem" => Endpoint::Mem(parse_name(url, rest, "mem")?),
            _ => {
                return Err(invalid(
                    url,
                    "unknown scheme; expected tcp, unix, shm or mem",
                ));
            }
        };
        Ok(endpoint)
    }

    /// The URL of the object published as `name` at this endpoint.
    pub fn object_url(&self, name: &str) -> String {
        match self {
            Endpoint::Unix(_) => format!("{self}/{}", escape_unix_name(name)),
            _ => format!("{self}/{name}"),
        }
    }
}

/// A name as a Unix object URL writes it: the name is the path's last segment, so a `/`
/// in it is written `%2F` (and a `%`, to tell it from one, `%25`).
fn escape_unix_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(['/', '%']) {
        name.replace('%', "%25").replace('/', "%2F").into()
    } else {
        name.into()
    }
}

/// The name a Unix object URL's last segment writes (see [`escape_unix_name`]): `%2F` is
/// a `/`, `%25` a `%`; any other `%` stands for itself.
fn unescape_unix_name(written: &str) -> String {
    let mut name = String::with_capacity(written.len());
    let mut rest = written;
    while let Some(at) = rest.find('%') {
        name.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        if escape.is_some_and(|e| e.eq_ignore_ascii_case("%2F")) {
            name.push('/');
            rest = &rest[at + 3..];
        } else if escape == Some("%25") {
            name.push('%');
            rest = &rest[at + 3..];
        } else {
            name.push('%');
            rest = &rest[at + 1..];
        }
    }
    name.push_str(rest);
    name
}

fn parse_name(url: &str, name: &str, scheme: &str) -> Result<String, Error> {
    if name.is_empty() || name.contains('/') {
        return Err(invalid(url, &format!("a {scheme} URL is {scheme}://name")));
    }
    Ok(name.to_owned())
}

fn parse_authority(url: &str, authority: &str) -> Result<String, Error> {
    if authority.is_empty() {
        return Err(invalid(url, "a tcp URL needs host:port"));
    }
    let (host, port) = authority
        .rsplit_once(':')
        .filter(|(_, port)| !port.contains(']'))
        .ok_or_else(|| invalid(url, "a tcp URL needs a port: tcp://host:port"))?;
    // Digits only: `u16`'s parser also takes a sign.
    let number = port
        .parse::<u16>()
        .ok()
        .filter(|_| port.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| invalid(url, "the port is not a number from 0 to 65535"))?;
    if host.is_empty() {
        return Err(invalid(url, "a tcp URL needs a host: tcp://host:port"));
    }
    // An IPv6 address goes in brackets: `tcp://fe80::1:7000` could be fe80::1 on port
    // 7000, or fe80::1:7000 with the port missing.
    let bracketed = host.len() > 2 && host.starts_with('[') && host.ends_with(']');
    if !bracketed && host.contains(':') {
        return Err(invalid(
            url,
            "an IPv6 address goes in brackets: tcp://[::1]:7000",
        ));
    }
    if !bracketed && host.contains(['[', ']', '/', '@', ' ']) {
        return Err(invalid(url, "the host is not a name or an address"));
    }
    // In brackets, an IPv6 address (and a zone after `%`) and nothing else.
    if bracketed {
        let inner = &host[1..host.len() - 1];
        let (address, zone) = inner.split_once('%').unwrap_or((inner, "1"));
        if address.parse::<std::net::Ipv6Addr>().is_err()
            || zone.is_empty()
            || !zone
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        {
            return Err(invalid(url, "the host in brackets is not an IPv6 address"));
        }
    }
    // One spelling per port (`h:080` is `h:80`): endpoints that are the same share a
    // connection, and a hand-off filter sees the port as it is used.
    Ok(format!("{host}:{number}"))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(address) => write!(f, "tcp://{address}"),
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Shm(name) => write!(f, "shm://{name}"),
            Endpoint::Mem(name) => write!(f, "mem://{name}"),
        }
    }
}

impl FromStr for Endpoint {
    type Err = Error;

    fn from_str(url: &str) -> Result<Endpoint, Error> {
        Endpoint::parse(url)
    }
}

/// An object's address: an endpoint plus the name the object is published under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    /// Where to connect.
    pub endpoint: Endpoint,
    /// The published name.
    pub name: String,
}

impl ObjectUrl {
    /// Parses `scheme://endpoint/name`.
    pub fn parse(url: &str) -> Result<ObjectUrl, Error> {
        let (scheme, rest) = split_scheme(url)?;
        let (endpoint, name) = match scheme {
            "unix" => rest
                .rsplit_once('/')
                .filter(|(path, _)| !path.is_empty())
                .map(|(path, name)| (format!("unix://{path}"), name)),
            _ => rest
                .split_once('/')
                .map(|(endpoint, name)| (format!("{scheme}://{endpoint}"), name)),
        }
        .ok_or_else(|| invalid(url, "expected an object name after the endpoint: …/name"))?;
        if name.is_empty() {
            return Err(invalid(url, "the object name is empty"));
        }
        let name = match scheme {
            "unix" => unescape_unix_name(name),
            _ => name.to_owned(),
        };
        Ok(ObjectUrl {
            endpoint: Endpoint::parse_reporting(&endpoint, url)?,
            name,
        })
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.endpoint.object_url(&self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        let url = ObjectUrl::parse("tcp://127.0.0.1:7000/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Tcp("127.0.0.1:7000".into()));
        assert_eq!(url.name, "calc");
        let url = ObjectUrl::parse("unix:///tmp/s.sock/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Unix("/tmp/s.sock".into()));
        assert_eq!(url.name, "calc");
        let url = ObjectUrl::parse("mem://name/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Mem("name".into()));
        let url = ObjectUrl::parse("shm://fast/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Shm("fast".into()));
        assert_eq!(url.name, "calc");
        let url = ObjectUrl::parse("tcp://[fe80::1%eth0]:7000/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Tcp("[fe80::1%eth0]:7000".into()));
        let url = ObjectUrl::parse("tcp://[::ffff:127.0.0.1]:7000/calc").unwrap();
        assert_eq!(
            url.endpoint,
            Endpoint::Tcp("[::ffff:127.0.0.1]:7000".into())
        );
        let url = ObjectUrl::parse("tcp://[::1]:7000/calc").unwrap();
        assert_eq!(url.endpoint, Endpoint::Tcp("[::1]:7000".into()));
        assert_eq!(url.to_string(), "tcp://[::1]:7000/calc");
    }

    #[test]
    fn rejects_bad_urls_with_a_reason() {
        for bad in [
            "calc",
            "http://x:1/calc",
            "tcp://127.0.0.1/calc",
            "tcp://127.0.0.1:99999/calc",
            "tcp://127.0.0.1:7000/",
            "unix://relative/calc",
            "unix:///run/app/../../tmp/evil.sock/calc",
            "unix:///run/./app.sock/calc",
            "tcp://::1:7000/calc",
            "tcp://fe80::1:7000/calc",
            "tcp://:7000/calc",
            "tcp://host:+80/calc",
            "tcp://host:/calc",
            "tcp://[::1:7000/calc",
            "tcp://[[::1]:7000/calc",
            "tcp://[::1]]:7000/calc",
            "tcp://[a b]:7000/calc",
            "tcp://[localhost]:7000/calc",
            "tcp://[::1%]:7000/calc",
            "mem:///calc",
            "shm:///calc",
        ] {
            let error = ObjectUrl::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(error.message().contains(bad), "{error}");
        }
    }

    #[test]
    fn control_characters_are_refused() {
        for bad in [
            "tcp://host\n:80/calc",
            "unix:///tmp/\u{1b}[2J.sock/calc",
            "shm://a\rb/calc",
            "tcp://a:1/na\u{85}me",
            "mem://x\t/calc",
        ] {
            let error = ObjectUrl::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{bad:?}");
            assert!(error.message().contains("control characters"), "{error}");
            assert!(!error.message().chars().any(char::is_control), "{error}");
            assert!(Endpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Whatever either parser makes of any string, it never panics, and what it
        /// accepts prints back to itself (`crate::fuzzing::url_parse` checks it all).
        #[test]
        fn any_string_parses_back_or_is_refused(text in "(?s).{0,64}") {
            crate::fuzzing::url_parse(text.as_bytes());
        }

        /// URLs built from plausible parts, control characters and odd separators among
        /// them, likewise.
        #[test]
        fn built_urls_parse_back_or_are_refused(
            scheme in "(tcp|unix|shm|mem|http)",
            middle in "[a-z0-9./:\\[\\]@ \\n\\x1b-]{0,24}",
            name in "[a-z0-9/.\\r-]{0,8}",
        ) {
            crate::fuzzing::url_parse(format!("{scheme}://{middle}/{name}").as_bytes());
        }
    }

    #[test]
    fn one_port_has_one_spelling() {
        assert_eq!(
            Endpoint::parse("tcp://localhost:0080").unwrap(),
            Endpoint::parse("tcp://localhost:80").unwrap()
        );
        let url = ObjectUrl::parse("tcp://[::1]:007/calc").unwrap();
        assert_eq!(url.to_string(), "tcp://[::1]:7/calc");
    }

    #[test]
    fn unix_names_with_a_slash_or_a_percent_round_trip() {
        let endpoint = Endpoint::Unix("/tmp/s.sock".into());
        for name in ["svc/calc", "50%", "a%2Fb", "/", "%25", "plain"] {
            let url = endpoint.object_url(name);
            let parsed = ObjectUrl::parse(&url).unwrap();
            assert_eq!(
                (&parsed.endpoint, parsed.name.as_str()),
                (&endpoint, name),
                "{url}"
            );
            assert_eq!(parsed.to_string(), url);
        }
        assert_eq!(
            ObjectUrl::parse("unix:///tmp/s.sock/a%2fb").unwrap().name,
            "a/b"
        );
        assert_eq!(
            ObjectUrl::parse("unix:///tmp/s.sock/x%zz%").unwrap().name,
            "x%zz%"
        );
        // Other schemes carry a `/` as it is.
        assert_eq!(ObjectUrl::parse("tcp://h:1/a/b").unwrap().name, "a/b");
        assert_eq!(ObjectUrl::parse("tcp://h:1/a%2Fb").unwrap().name, "a%2Fb");
    }

    #[test]
    fn endpoint_display_round_trips() {
        for url in [
            "tcp://localhost:80",
            "unix:///run/a.sock",
            "shm://x",
            "mem://x",
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().to_string(), url);
        }
    }
}
