//! Server side of SCRAM-SHA-256 (RFC 5802 / RFC 7677) as PostgreSQL speaks
//! it inside SASL authentication messages, without channel binding.
//!
//! The server never knows the password: it holds a [`Verifier`] in
//! PostgreSQL's stored form `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
//! (base64 salt and keys), made once from the password by
//! [`Verifier::from_password`] (`init --pwfile`, `WALSHM_PASSWORD`). An
//! exchange sends the stored salt and iteration count, recovers ClientKey
//! from the proof (proof XOR HMAC(StoredKey, AuthMessage)), checks that
//! H(ClientKey) = StoredKey, and signs with ServerKey, as RFC 5802 §3 says.
//!
//! Invariants: a fresh random nonce per exchange; without a verifier the
//! exchange still runs (with a random mock salt) and always fails, so a
//! client cannot tell; the proof is compared in constant time; every
//! malformed client message or stored verifier is a typed error, never a
//! panic. The user name inside the SCRAM messages is ignored (libpq sends
//! an empty one), as PostgreSQL does. The password is used as is (SASLprep
//! is the identity for ASCII passwords).

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

/// What the server stores instead of a password (PostgreSQL's
/// `pg_authid.rolpassword` for SCRAM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl Verifier {
    /// The verifier of `password` with `salt` and [`ITERATIONS`].
    pub fn from_password(password: &str, salt: &[u8]) -> Verifier {
        let salted = salted_password(password.as_bytes(), salt, ITERATIONS);
        Verifier {
            iterations: ITERATIONS,
            salt: salt.to_vec(),
            stored_key: sha256(&hmac(&salted, b"Client Key")),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Parses the stored form; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Verifier, String> {
        let bad = |why: &str| {
            format!("invalid SCRAM verifier ({why}); expected {MECHANISM}$<iterations>:<salt>$<StoredKey>:<ServerKey>")
        };
        let rest = text
            .strip_prefix(MECHANISM)
            .and_then(|r| r.strip_prefix('$'))
            .ok_or_else(|| bad("it does not start with SCRAM-SHA-256$"))?;
        let (params, keys) = rest.split_once('$').ok_or_else(|| bad("no keys"))?;
        let (iterations, salt) = params.split_once(':').ok_or_else(|| bad("no salt"))?;
        let iterations: u32 = iterations
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad("bad iteration count"))?;
        let salt = B64
            .decode(salt)
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("bad salt"))?;
        let (stored, server) = keys.split_once(':').ok_or_else(|| bad("no ServerKey"))?;
        let key = |k: &str, what: &str| -> Result<[u8; 32], String> {
            B64.decode(k)
                .ok()
                .and_then(|v| <[u8; 32]>::try_from(v).ok())
                .ok_or_else(|| bad(what))
        };
        Ok(Verifier {
            iterations,
            salt,
            stored_key: key(stored, "bad StoredKey")?,
            server_key: key(server, "bad ServerKey")?,
        })
    }
}

impl std::fmt::Display for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{MECHANISM}${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

/// The stored form of `password` with a fresh random salt (what
/// `init --pwfile` writes to walshm.conf).
pub fn verifier_for_password(password: &str) -> std::io::Result<String> {
    let salt: [u8; SALT_LEN] = crate::startup::random_bytes()?;
    Ok(Verifier::from_password(password, &salt).to_string())
}

/// State kept between the server-first and client-final messages.
pub struct Exchange {
    /// StoredKey and ServerKey; None: no password configured, the exchange
    /// is run but always fails.
    keys: Option<([u8; 32], [u8; 32])>,
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

/// Byte-wise XOR: ClientProof = ClientKey XOR ClientSignature, and the
/// server recovers ClientKey the same way (RFC 5802).
fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
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
    /// server-first message. `random` supplies the nonce bytes and, without
    /// a verifier, a mock salt.
    pub fn start(
        client_first: &[u8],
        verifier: Option<&Verifier>,
        random: &[u8; 34],
    ) -> Result<(Exchange, String), ScramError> {
        let msg = std::str::from_utf8(client_first)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let (gs2_header, client_first_bare, client_nonce) = parse_client_first(msg)?;
        let (nonce_bytes, mock_salt) = random.split_at(NONCE_LEN);
        debug_assert_eq!(mock_salt.len(), SALT_LEN);
        let nonce = format!("{client_nonce}{}", B64.encode(nonce_bytes));
        let (salt, iterations) = match verifier {
            Some(v) => (v.salt.as_slice(), v.iterations),
            None => (mock_salt, ITERATIONS),
        };
        let server_first = format!("r={nonce},s={},i={iterations}", B64.encode(salt));
        let exchange = Exchange {
            keys: verifier.map(|v| (v.stored_key, v.server_key)),
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
        let (stored_key, server_key) = self.keys.ok_or(ScramError::WrongPassword)?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let client_key = xor(&proof, &client_signature);
        if !constant_time_eq(&sha256(&client_key), &stored_key) {
            return Err(ScramError::WrongPassword);
        }
        let server_signature = hmac(&server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

/// The client side of one exchange (a standby's walreceiver logging in to
/// its primary): client-first, then client-final from the server-first
/// message, then a check of the server's signature. No channel binding
/// (`n,,`), an empty user name (the startup packet names the user), as
/// libpq sends them.
pub struct ClientExchange {
    password: String,
    client_first_bare: String,
    /// The ServerSignature the server-final message must carry.
    expected_server_signature: Option<[u8; 32]>,
}

impl ClientExchange {
    /// A new exchange with a random nonce.
    pub fn new(password: &str) -> std::io::Result<ClientExchange> {
        let nonce: [u8; NONCE_LEN] = crate::startup::random_bytes()?;
        Ok(ClientExchange {
            password: password.to_string(),
            client_first_bare: format!("n=,r={}", B64.encode(nonce)),
            expected_server_signature: None,
        })
    }

    /// The client-first message.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The client-final message for the server-first message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<String, ScramError> {
        let msg = std::str::from_utf8(server_first)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let mut attrs = msg.split(',');
        let nonce = attribute(attrs.next(), 'r')?;
        let ours = &self.client_first_bare["n=,r=".len()..];
        if !nonce.starts_with(ours) || nonce.len() == ours.len() || !is_valid_nonce(nonce) {
            return Err(ScramError::Malformed("invalid server nonce".into()));
        }
        let salt = B64
            .decode(attribute(attrs.next(), 's')?)
            .map_err(|_| ScramError::Malformed("invalid salt".into()))?;
        let iterations: u32 = attribute(attrs.next(), 'i')?
            .parse()
            .map_err(|_| ScramError::Malformed("invalid iteration count".into()))?;
        let salted = salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode("n,,"));
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &signature);
        let server_key = hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message (the server knew the verifier).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let msg = std::str::from_utf8(server_final)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let got = B64
            .decode(attribute(Some(msg), 'v')?)
            .map_err(|_| ScramError::Malformed("invalid server signature".into()))?;
        match self.expected_server_signature {
            Some(want) if constant_time_eq(&got, &want) => Ok(()),
            _ => Err(ScramError::WrongPassword),
        }
    }
}

/// Equality whose time depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client side (`ClientExchange`, which computes what libpq
    /// does) with a fixed client nonce: (client-final, the server-final
    /// it expects).
    fn client_final(
        server_first: &str,
        client_first_bare: &str,
        password: &str,
    ) -> (String, String) {
        let mut c = ClientExchange {
            password: password.into(),
            client_first_bare: client_first_bare.into(),
            expected_server_signature: None,
        };
        let fin = c.client_final(server_first.as_bytes()).unwrap();
        let server_sig = c.expected_server_signature.unwrap();
        (fin, format!("v={}", B64.encode(server_sig)))
    }

    #[test]
    fn client_exchange_logs_in_and_checks_the_server() {
        let v = verifier("secret");
        let mut c = ClientExchange::new("secret").unwrap();
        let first = c.client_first();
        let (ex, server_first) = Exchange::start(first.as_bytes(), Some(&v), &[9; 34]).unwrap();
        let fin = c.client_final(server_first.as_bytes()).unwrap();
        let server_final = ex.finish(fin.as_bytes()).unwrap();
        assert_eq!(c.verify_server_final(server_final.as_bytes()), Ok(()));
        assert!(c.verify_server_final(b"v=AAAA").is_err());
        let mut wrong = ClientExchange::new("nope").unwrap();
        let (ex, server_first) =
            Exchange::start(wrong.client_first().as_bytes(), Some(&v), &[9; 34]).unwrap();
        let fin = wrong.client_final(server_first.as_bytes()).unwrap();
        assert_eq!(ex.finish(fin.as_bytes()), Err(ScramError::WrongPassword));
        assert!(c.client_final(b"r=other,s=AAAA,i=1").is_err());
    }

    fn verifier(password: &str) -> Verifier {
        Verifier::from_password(password, b"0123456789abcdef")
    }

    #[test]
    fn verifier_round_trips_in_postgres_form() {
        let v = verifier("secret");
        let text = v.to_string();
        assert!(text.starts_with("SCRAM-SHA-256$4096:"), "{text}");
        assert!(!text.contains("secret"));
        assert_eq!(Verifier::parse(&text).unwrap(), v);
        for bad in [
            "secret",
            "SCRAM-SHA-256$4096:c2FsdA==",
            "SCRAM-SHA-256$0:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA",
            "md5abcdef",
        ] {
            assert!(Verifier::parse(bad).is_err(), "{bad} accepted");
        }
    }

    /// RFC 7677 §3's example exchange (user "user", password "pencil"),
    /// checked from the verifier alone.
    #[test]
    fn rfc7677_example_verifies_from_the_verifier() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = Verifier::from_password("pencil", &salt);
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let ex = Exchange {
            keys: Some((v.stored_key, v.server_key)),
            gs2_header: "n,,".into(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            server_first: format!("r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
            nonce: nonce.into(),
        };
        let client_final =
            format!("c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        assert_eq!(
            ex.finish(client_final.as_bytes()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn right_password_verifies_both_ways() {
        let (ex, server_first) =
            Exchange::start(b"n,,n=,r=abcDEF123", Some(&verifier("secret")), &[7; 34]).unwrap();
        assert!(server_first.starts_with("r=abcDEF123"));
        let (final_msg, expected_server_final) =
            client_final(&server_first, "n=,r=abcDEF123", "secret");
        assert_eq!(
            ex.finish(final_msg.as_bytes()).unwrap(),
            expected_server_final
        );
    }

    /// An exchange (client nonce "abc") against `stored`, the client
    /// proving `password`: what the server's last step returns.
    fn finish_with(stored: Option<&Verifier>, password: &str) -> Result<String, ScramError> {
        let (ex, server_first) = Exchange::start(b"n,,n=,r=abc", stored, &[1; 34]).unwrap();
        let (final_msg, _) = client_final(&server_first, "n=,r=abc", password);
        ex.finish(final_msg.as_bytes())
    }

    #[test]
    fn wrong_password_fails() {
        assert_eq!(
            finish_with(Some(&verifier("secret")), "nope"),
            Err(ScramError::WrongPassword)
        );
    }

    #[test]
    fn no_password_configured_always_fails() {
        assert_eq!(finish_with(None, ""), Err(ScramError::WrongPassword));
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert!(Exchange::start(b"", Some(&verifier("x")), &[0; 34]).is_err());
        assert!(Exchange::start(b"n,,r=abc", Some(&verifier("x")), &[0; 34]).is_err());
        assert!(matches!(
            Exchange::start(
                b"p=tls-server-end-point,,n=,r=a",
                Some(&verifier("x")),
                &[0; 34]
            ),
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            Exchange::start(b"n,a=bob,n=,r=a", Some(&verifier("x")), &[0; 34]),
            Err(ScramError::Unsupported(_))
        ));
        let (ex, _) = Exchange::start(b"n,,n=,r=abc", Some(&verifier("x")), &[0; 34]).unwrap();
        assert!(ex.finish(b"c=biws,r=abc").is_err());
        assert!(ex.finish(b"c=biws,r=wrong,p=AAAA").is_err());
        assert!(ex.finish(b"\xff").is_err());
    }
}
