//! Server side of SCRAM-SHA-256 (RFC 5802 / RFC 7677) as PostgreSQL speaks
//! it inside SASL authentication messages, without channel binding.
//!
//! Invariants: the password is known in plain text, so a fresh random salt
//! and nonce are drawn per exchange (nothing is stored); the client proof is
//! compared in constant time; every malformed client message is a typed
//! `ScramError`, never a panic. The user name inside the SCRAM messages is
//! ignored (libpq sends an empty one), as PostgreSQL does. The password is
//! used as is (SASLprep is the identity for ASCII passwords).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

pub const MECHANISM: &str = "SCRAM-SHA-256";
pub const ITERATIONS: u32 = 4096;
const NONCE_LEN: usize = 18;
const SALT_LEN: usize = 16;

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramError {
    /// The client's message does not follow the SCRAM grammar.
    Malformed(String),
    /// The client asked for something PostgreSQL would refuse (channel binding, authzid).
    Unsupported(String),
    /// Well-formed, but the proof is wrong (or no password is configured).
    WrongPassword,
}

/// State kept between the server-first and client-final messages.
pub struct Exchange {
    /// None: no password configured; the exchange is run but always fails.
    salted_password: Option<[u8; 32]>,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// PBKDF2-HMAC-SHA256 with a 32-byte output: SCRAM's `Hi()`.
pub fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
    out
}

/// Splits `attr=value` and checks the attribute letter.
fn attribute(part: Option<&str>, name: char) -> Result<&str, ScramError> {
    let part =
        part.ok_or_else(|| ScramError::Malformed(format!("attribute \"{name}\" missing")))?;
    let mut chars = part.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(ScramError::Malformed(format!(
            "expected attribute \"{name}\" but found \"{part}\""
        )));
    }
    Ok(&part[2..])
}

fn is_valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Parses the gs2 header and bare part of the client-first message.
fn parse_client_first(msg: &str) -> Result<(String, String, String), ScramError> {
    let mut parts = msg.splitn(3, ',');
    let cbind = parts.next().unwrap_or("");
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => {
            return Err(ScramError::Unsupported(
                "channel binding is not supported by this server (no SSL)".into(),
            ))
        }
        _ => {
            return Err(ScramError::Malformed(
                "unexpected channel-binding flag".into(),
            ))
        }
    }
    let authzid = parts
        .next()
        .ok_or_else(|| ScramError::Malformed("comma expected".into()))?;
    if !authzid.is_empty() {
        return Err(ScramError::Unsupported(
            "client uses authorization identity, but it is not supported".into(),
        ));
    }
    let bare = parts
        .next()
        .ok_or_else(|| ScramError::Malformed("comma expected".into()))?;
    let mut attrs = bare.split(',');
    let first = attrs.next();
    if first.is_some_and(|a| a.starts_with("m=")) {
        return Err(ScramError::Unsupported(
            "client requires an unsupported SCRAM extension".into(),
        ));
    }
    attribute(first, 'n')?;
    let nonce = attribute(attrs.next(), 'r')?;
    if !is_valid_nonce(nonce) {
        return Err(ScramError::Malformed("invalid client nonce".into()));
    }
    Ok((
        format!("{cbind},{authzid},"),
        bare.to_string(),
        nonce.to_string(),
    ))
}

impl Exchange {
    /// Handles the client-first message; returns the state and the
    /// server-first message. `random` supplies salt and nonce bytes.
    pub fn start(
        client_first: &[u8],
        password: Option<&str>,
        random: &[u8; 34],
    ) -> Result<(Exchange, String), ScramError> {
        let msg = std::str::from_utf8(client_first)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let (gs2_header, client_first_bare, client_nonce) = parse_client_first(msg)?;
        let (nonce_bytes, salt) = random.split_at(NONCE_LEN);
        debug_assert_eq!(salt.len(), SALT_LEN);
        let nonce = format!("{client_nonce}{}", B64.encode(nonce_bytes));
        let server_first = format!("r={nonce},s={},i={ITERATIONS}", B64.encode(salt));
        let salted_password = password.map(|p| salted_password(p.as_bytes(), salt, ITERATIONS));
        let exchange = Exchange {
            salted_password,
            gs2_header,
            client_first_bare,
            server_first: server_first.clone(),
            nonce,
        };
        Ok((exchange, server_first))
    }

    /// Verifies the client-final message; returns the server-final message.
    pub fn finish(&self, client_final: &[u8]) -> Result<String, ScramError> {
        let msg = std::str::from_utf8(client_final)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let proof_at = msg
            .rfind(",p=")
            .ok_or_else(|| ScramError::Malformed("proof missing".into()))?;
        let without_proof = &msg[..proof_at];
        let proof_b64 = &msg[proof_at + 3..];
        let mut attrs = without_proof.split(',');
        let cbind = B64
            .decode(attribute(attrs.next(), 'c')?)
            .map_err(|_| ScramError::Malformed("invalid channel binding data".into()))?;
        if cbind != self.gs2_header.as_bytes() {
            return Err(ScramError::Malformed(
                "unexpected SCRAM channel-binding attribute in client-final-message".into(),
            ));
        }
        if attribute(attrs.next(), 'r')? != self.nonce {
            return Err(ScramError::Malformed("nonce does not match".into()));
        }
        let proof = B64
            .decode(proof_b64)
            .map_err(|_| ScramError::Malformed("malformed proof".into()))?;
        if proof.len() != 32 {
            return Err(ScramError::Malformed(
                "malformed proof in client-final-message".into(),
            ));
        }
        let salted = self.salted_password.ok_or(ScramError::WrongPassword)?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let recovered: Vec<u8> = proof
            .iter()
            .zip(client_signature.iter())
            .map(|(a, b)| a ^ b)
            .collect();
        if !constant_time_eq(&sha256(&recovered), &stored_key) {
            return Err(ScramError::WrongPassword);
        }
        let server_key = hmac(&salted, b"Server Key");
        let server_signature = hmac(&server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client side, as libpq computes it.
    fn client_final(
        server_first: &str,
        client_first_bare: &str,
        password: &str,
    ) -> (String, String) {
        let mut salt = "";
        let mut nonce = "";
        let mut iterations = 0;
        for part in server_first.split(',') {
            match &part[..2] {
                "r=" => nonce = &part[2..],
                "s=" => salt = &part[2..],
                "i=" => iterations = part[2..].parse().unwrap(),
                _ => {}
            }
        }
        let salted = salted_password(password.as_bytes(), &B64.decode(salt).unwrap(), iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let client_key = hmac(&salted, b"Client Key");
        let sig = hmac(&sha256(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(sig).map(|(a, b)| a ^ b).collect();
        let server_sig = hmac(&hmac(&salted, b"Server Key"), auth.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            format!("v={}", B64.encode(server_sig)),
        )
    }

    #[test]
    fn right_password_verifies_both_ways() {
        let (ex, server_first) =
            Exchange::start(b"n,,n=,r=abcDEF123", Some("secret"), &[7; 34]).unwrap();
        assert!(server_first.starts_with("r=abcDEF123"));
        let (final_msg, expected_server_final) =
            client_final(&server_first, "n=,r=abcDEF123", "secret");
        assert_eq!(
            ex.finish(final_msg.as_bytes()).unwrap(),
            expected_server_final
        );
    }

    #[test]
    fn wrong_password_fails() {
        let (ex, server_first) = Exchange::start(b"n,,n=,r=abc", Some("secret"), &[1; 34]).unwrap();
        let (final_msg, _) = client_final(&server_first, "n=,r=abc", "nope");
        assert_eq!(
            ex.finish(final_msg.as_bytes()),
            Err(ScramError::WrongPassword)
        );
    }

    #[test]
    fn no_password_configured_always_fails() {
        let (ex, server_first) = Exchange::start(b"n,,n=,r=abc", None, &[1; 34]).unwrap();
        let (final_msg, _) = client_final(&server_first, "n=,r=abc", "");
        assert_eq!(
            ex.finish(final_msg.as_bytes()),
            Err(ScramError::WrongPassword)
        );
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert!(Exchange::start(b"", Some("x"), &[0; 34]).is_err());
        assert!(Exchange::start(b"n,,r=abc", Some("x"), &[0; 34]).is_err());
        assert!(matches!(
            Exchange::start(b"p=tls-server-end-point,,n=,r=a", Some("x"), &[0; 34]),
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            Exchange::start(b"n,a=bob,n=,r=a", Some("x"), &[0; 34]),
            Err(ScramError::Unsupported(_))
        ));
        let (ex, _) = Exchange::start(b"n,,n=,r=abc", Some("x"), &[0; 34]).unwrap();
        assert!(ex.finish(b"c=biws,r=abc").is_err());
        assert!(ex.finish(b"c=biws,r=wrong,p=AAAA").is_err());
        assert!(ex.finish(b"\xff").is_err());
    }
}
