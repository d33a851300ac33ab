//! The start-up phase of a connection: SSL/GSS negotiation (refused with
//! 'N'), CancelRequest, StartupMessage, authentication (peer-uid trust on
//! Unix sockets, SCRAM-SHA-256 on TCP), and the AuthenticationOk /
//! ParameterStatus / BackendKeyData / ReadyForQuery greeting.
//!
//! Who may replicate (PostgreSQL's superuser or REPLICATION role
//! attribute, `StartupInfo::may_replicate`): user names are not
//! authenticated here (the Unix socket admits only the server's own OS
//! user, whatever name it gives; TCP logins share one password), so the
//! permission goes with a credential, not a name. A Unix-socket peer runs
//! as the owner of the data directory and may replicate (the superuser).
//! Over TCP, a connection that asks for `replication` authenticates with
//! `ServerParams::replication_password` when one is set (and may then
//! replicate), otherwise with the login password, after which it is
//! refused with FATAL 42501 "must be superuser or replication role to
//! start walsender", before it takes a walsender entry (as InitPostgres
//! checks before the walsender starts). A TCP session that logged in with
//! the login password may not replicate.
//!
//! Invariants: reads here are exact (nothing is read beyond the current
//! packet, so `serve` can take over the stream); every refusal sends a FATAL
//! ErrorResponse first when the peer speaks the protocol, and then yields
//! `Startup::Rejected`; nothing the client sends can make this panic.

use std::io::{self, Read, Write};

use crate::codec::{BodyReader, Out};
use crate::error::{sqlstate, SqlError};
use crate::scram::{self, Exchange, ScramError};
use crate::settings;
use crate::wire::{read_exact_retrying, send};

/// PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
const MAX_STARTUP_PACKET_LEN: usize = 10_000;
/// Longest SASL message accepted (PG_MAX_AUTH_TOKEN_LENGTH).
const MAX_AUTH_MESSAGE_LEN: usize = 65_535;
#[cfg(test)]
const PROTOCOL_3_0: i32 = 3 << 16;
const CANCEL_REQUEST_CODE: i32 = (1234 << 16) | 5678;
const SSL_REQUEST_CODE: i32 = (1234 << 16) | 5679;
const GSSENC_REQUEST_CODE: i32 = (1234 << 16) | 5680;

/// What the postmaster knows when it hands a connection over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerParams {
    /// Reported as server_version ("15.0 (walshm)" is fine: libpq only parses the leading number).
    pub server_version: String,
    pub backend_pid: i32,
    /// Secret key of BackendKeyData, checked against later CancelRequests.
    pub secret_key: i32,
    /// SCRAM verifier for TCP connections, in PostgreSQL's stored form
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (never
    /// a plain password); None, or a text that does not parse: no TCP
    /// authentication can succeed.
    pub password: Option<String>,
    /// The replication role's verifier (same form): TCP connections that
    /// ask for `replication` authenticate with it instead of `password`.
    /// None: no TCP connection may replicate.
    pub replication_password: Option<String>,
}

impl ServerParams {
    /// Params with the default server_version.
    pub fn new(backend_pid: i32, secret_key: i32, password: Option<String>) -> Self {
        ServerParams {
            server_version: settings::DEFAULT_SERVER_VERSION.to_string(),
            backend_pid,
            secret_key,
            password,
            replication_password: None,
        }
    }

    /// The same, with the replication role's verifier.
    pub fn with_replication_password(mut self, verifier: Option<String>) -> Self {
        self.replication_password = verifier;
        self
    }
}

/// How the client reached us, for authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Unix-domain socket: trusted only when the peer runs as the server's user
    /// (peer_uid from SO_PEERCRED; None if unknown).
    Unix {
        peer_uid: Option<u32>,
        server_uid: u32,
    },
    /// TCP: SCRAM-SHA-256 with `ServerParams::password` (or, for a
    /// replication connection, `replication_password` when set).
    Tcp,
}

/// What the client asked for in its StartupMessage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartupInfo {
    pub user: String,
    /// Defaults to the user name, as in PostgreSQL.
    pub database: String,
    pub application_name: String,
    /// `synchronous_commit` given at start-up (parameter or `-c` in `options`,
    /// e.g. PGOPTIONS): whether commits flush locally. The integrator applies
    /// it with `Session::set_synchronous_commit` before calling `serve`.
    pub synchronous_commit: Option<bool>,
    /// The same value's canonical level name (`remote_write`, `local`, ...),
    /// as SET keeps it: the integrator applies it with
    /// `Session::set_synchronous_commit_level` and makes it the session's
    /// default, which SHOW prints and RESET returns to.
    pub synchronous_commit_level: Option<&'static str>,
    /// All other run-time parameters sent at start-up (accepted, not applied).
    pub options: Vec<(String, String)>,
    /// `replication=true` (physical) or `replication=database`: the
    /// connection becomes a walsender (see `replication`).
    pub replication: Option<ReplicationMode>,
    /// Set by authentication: the client may replicate (start a
    /// walsender, use replication slots); see the module header.
    pub may_replicate: bool,
}

/// What `replication` asked for in the StartupMessage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationMode {
    Physical,
    Database,
}

/// PostgreSQL's reading of the `replication` parameter: a boolean or
/// `database`; anything else is FATAL 22023.
fn parse_replication(value: &str) -> Result<Option<ReplicationMode>, SqlError> {
    match value.to_ascii_lowercase().as_str() {
        "database" => Ok(Some(ReplicationMode::Database)),
        "true" | "on" | "yes" | "1" => Ok(Some(ReplicationMode::Physical)),
        "false" | "off" | "no" | "0" => Ok(None),
        _ => Err(SqlError::fatal(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"replication\": \"{value}\""),
        )
        .with_hint("Valid values are: \"false\", 0, \"true\", 1, \"database\".")),
    }
}

/// Outcome of the start-up phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    /// Authenticated and greeted: call `serve` next.
    Ready(StartupInfo),
    /// A CancelRequest: the caller signals the backend with this pid if the key matches, then closes.
    Cancel { pid: i32, key: i32 },
    /// Refused (the error has been sent if the client was still there): close the connection.
    Rejected,
}

/// The first packet of a connection, after SSL/GSS negotiation.
enum FirstPacket {
    Startup {
        version: i32,
        body: Vec<u8>,
    },
    Cancel {
        pid: i32,
        key: i32,
    },
    /// Garbage length or EOF: close without a word (PostgreSQL only logs this).
    Invalid,
}

fn read_i32<S: Read>(stream: &mut S) -> io::Result<i32> {
    let mut b = [0u8; 4];
    read_exact_retrying(stream, &mut b)?;
    Ok(i32::from_be_bytes(b))
}

fn read_first_packet<S: Read + Write>(stream: &mut S) -> io::Result<FirstPacket> {
    let (mut ssl_done, mut gss_done) = (false, false);
    loop {
        let len = match read_i32(stream) {
            Ok(len) => len,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(FirstPacket::Invalid),
            Err(e) => return Err(e),
        };
        if len < 8 || len as usize > MAX_STARTUP_PACKET_LEN {
            return Ok(FirstPacket::Invalid);
        }
        let mut body = vec![0u8; len as usize - 4];
        match read_exact_retrying(stream, &mut body) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(FirstPacket::Invalid),
            Err(e) => return Err(e),
        }
        let code = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        match code {
            SSL_REQUEST_CODE if !ssl_done => {
                ssl_done = true;
                send(stream, b"N")?;
            }
            GSSENC_REQUEST_CODE if !gss_done => {
                gss_done = true;
                send(stream, b"N")?;
            }
            CANCEL_REQUEST_CODE if body.len() == 12 => {
                let pid = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                let key = i32::from_be_bytes([body[8], body[9], body[10], body[11]]);
                return Ok(FirstPacket::Cancel { pid, key });
            }
            version => {
                return Ok(FirstPacket::Startup {
                    version,
                    body: body[4..].to_vec(),
                })
            }
        }
    }
}

/// Name/value pairs of a StartupMessage body (after the version).
fn parse_startup_parameters(body: &[u8]) -> Result<Vec<(String, String)>, SqlError> {
    if body.last() != Some(&0) {
        return Err(SqlError::protocol_violation(
            "invalid startup packet layout: expected terminator as last byte",
        ));
    }
    let mut r = BodyReader::new(body);
    let mut params = Vec::new();
    loop {
        let name = r.cstr().map_err(|e| e.to_sql_error())?;
        if name.is_empty() {
            break;
        }
        let value = r.cstr().map_err(|_| {
            SqlError::protocol_violation(
                "invalid startup packet layout: expected terminator as last byte",
            )
        })?;
        params.push((name, value));
    }
    if r.remaining() != 0 {
        return Err(SqlError::protocol_violation(
            "invalid startup packet layout: expected terminator as last byte",
        ));
    }
    Ok(params)
}

/// A validated StartupMessage: the info, the client encoding to report,
/// and protocol options we must tell the client we do not know.
struct Accepted {
    info: StartupInfo,
    client_encoding: &'static str,
    unrecognized: Vec<String>,
}

fn interpret_startup(version: i32, params: Vec<(String, String)>) -> Result<Accepted, SqlError> {
    let (major, minor) = (version >> 16, version & 0xffff);
    if major != 3 {
        return Err(SqlError::fatal(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"),
        ));
    }
    let mut info = StartupInfo::default();
    let mut client_encoding = "UTF8";
    let mut unrecognized = Vec::new();
    let mut settings_list = Vec::new();
    for (name, value) in params {
        match name.as_str() {
            "user" => info.user = value,
            "database" => info.database = value,
            "options" => settings_list.extend(settings::parse_options(&value)),
            "replication" => info.replication = parse_replication(&value)?,
            n if n.starts_with("_pq_.") => unrecognized.push(name),
            _ => settings_list.push((name, value)),
        }
    }
    for (name, value) in settings_list {
        match name.to_ascii_lowercase().as_str() {
            "application_name" => info.application_name = value,
            "client_encoding" => {
                client_encoding = settings::parse_client_encoding(&value).map_err(to_fatal)?
            }
            "synchronous_commit" => {
                let (on, level) = settings::parse_synchronous_commit(&value).map_err(to_fatal)?;
                info.synchronous_commit = Some(on);
                info.synchronous_commit_level = Some(level);
            }
            _ => info.options.push((name, value)),
        }
    }
    if info.user.is_empty() {
        return Err(SqlError::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            "no PostgreSQL user name specified in startup packet",
        ));
    }
    if info.database.is_empty() {
        info.database = info.user.clone();
    }
    Ok(Accepted {
        info,
        client_encoding,
        unrecognized,
    })
}

fn to_fatal(mut e: SqlError) -> SqlError {
    e.severity = "FATAL";
    e
}

fn send_error<S: Write>(stream: &mut S, e: &SqlError) -> io::Result<()> {
    let mut out = Out::new();
    out.error_or_notice(e);
    // The client may already be gone; the connection is closed either way.
    match send(stream, out.bytes()) {
        Err(err)
            if err.kind() == io::ErrorKind::BrokenPipe
                || err.kind() == io::ErrorKind::ConnectionReset =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Runs the start-up phase on a freshly accepted connection.
pub fn startup<S: Read + Write>(
    stream: &mut S,
    transport: &Transport,
    params: &ServerParams,
) -> io::Result<Startup> {
    startup_with(stream, transport, params, &mut |_| Ok(()))
}

/// [`startup`], with `admit` asked after authentication and before the
/// greeting (as PostgreSQL's InitPostgres checks its limits then): an
/// error from it is sent as the client's FATAL and the connection is
/// `Rejected` (e.g. 53300 for a walsender beyond max_wal_senders).
pub fn startup_with<S: Read + Write>(
    stream: &mut S,
    transport: &Transport,
    params: &ServerParams,
    admit: &mut dyn FnMut(&StartupInfo) -> Result<(), SqlError>,
) -> io::Result<Startup> {
    let (version, body) = match read_first_packet(stream)? {
        FirstPacket::Invalid => return Ok(Startup::Rejected),
        FirstPacket::Cancel { pid, key } => return Ok(Startup::Cancel { pid, key }),
        FirstPacket::Startup { version, body } => (version, body),
    };
    let mut accepted =
        match parse_startup_parameters(&body).and_then(|p| interpret_startup(version, p)) {
            Ok(a) => a,
            Err(e) => {
                send_error(stream, &e)?;
                return Ok(Startup::Rejected);
            }
        };
    let mut out = Out::new();
    if version & 0xffff > 0 || !accepted.unrecognized.is_empty() {
        out.negotiate_protocol_version(0, &accepted.unrecognized);
        send(stream, out.bytes())?;
        out.clear();
    }
    let Some(may_replicate) = authenticate(stream, transport, params, &accepted.info)? else {
        return Ok(Startup::Rejected);
    };
    accepted.info.may_replicate = may_replicate;
    if let Err(e) = replication_permitted(&accepted.info) {
        send_error(stream, &e)?;
        return Ok(Startup::Rejected);
    }
    if let Err(e) = admit(&accepted.info) {
        send_error(stream, &to_fatal(e))?;
        return Ok(Startup::Rejected);
    }
    greet(&mut out, params, &accepted);
    send(stream, out.bytes())?;
    Ok(Startup::Ready(accepted.info))
}

fn greet(out: &mut Out, params: &ServerParams, accepted: &Accepted) {
    out.authentication_ok();
    let info = &accepted.info;
    for (name, value) in settings::reported_parameters(
        &params.server_version,
        &info.user,
        &info.application_name,
        accepted.client_encoding,
    ) {
        out.parameter_status(name, &value);
    }
    out.backend_key_data(params.backend_pid, params.secret_key);
    out.ready_for_query(b'I');
}

/// A replication connection needs the permission to replicate
/// (PostgreSQL's InitPostgres check for a walsender).
fn replication_permitted(info: &StartupInfo) -> Result<(), SqlError> {
    if info.replication.is_none() || info.may_replicate {
        return Ok(());
    }
    Err(SqlError::fatal(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        "must be superuser or replication role to start walsender",
    ))
}

/// Authenticates: Some(whether the client may replicate), or None when
/// refused (the error has been sent).
fn authenticate<S: Read + Write>(
    stream: &mut S,
    transport: &Transport,
    params: &ServerParams,
    info: &StartupInfo,
) -> io::Result<Option<bool>> {
    let user = &info.user;
    match transport {
        Transport::Unix {
            peer_uid,
            server_uid,
        } => {
            if *peer_uid == Some(*server_uid) {
                return Ok(Some(true));
            }
            let e = SqlError::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                format!("Peer authentication failed for user \"{user}\""),
            );
            send_error(stream, &e)?;
            Ok(None)
        }
        Transport::Tcp => {
            let (verifier, may_replicate) = tcp_verifier(params, info.replication.is_some());
            match scram_exchange(stream, verifier.as_ref())? {
                Ok(()) => Ok(Some(may_replicate)),
                Err(ScramFailure::ClientGone) => Ok(None),
                Err(ScramFailure::Refused(e)) => {
                    send_error(stream, &scram_refusal(e, user))?;
                    Ok(None)
                }
            }
        }
    }
}

fn scram_refusal(e: ScramError, user: &str) -> SqlError {
    match e {
        ScramError::WrongPassword => SqlError::fatal(
            sqlstate::INVALID_PASSWORD,
            format!("password authentication failed for user \"{user}\""),
        ),
        ScramError::Unsupported(m) => SqlError::fatal(sqlstate::FEATURE_NOT_SUPPORTED, m),
        ScramError::Malformed(m) => {
            SqlError::protocol_violation("malformed SCRAM message").with_detail(m)
        }
    }
}

enum ScramFailure {
    ClientGone,
    Refused(ScramError),
}

/// Reads one password-type ('p') message body; None at EOF.
fn read_password_message<S: Read>(stream: &mut S) -> io::Result<Result<Vec<u8>, ScramFailure>> {
    let mut tag = [0u8; 1];
    match read_exact_retrying(stream, &mut tag) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Ok(Err(ScramFailure::ClientGone))
        }
        Err(e) => return Err(e),
    }
    let len = match read_i32(stream) {
        Ok(len) => len,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Ok(Err(ScramFailure::ClientGone))
        }
        Err(e) => return Err(e),
    };
    if tag[0] != b'p' {
        let m = format!("expected SASL response, got message type {}", tag[0]);
        return Ok(Err(ScramFailure::Refused(ScramError::Malformed(m))));
    }
    if len < 4 || len as usize - 4 > MAX_AUTH_MESSAGE_LEN {
        return Ok(Err(ScramFailure::Refused(ScramError::Malformed(
            "invalid SASL response length".into(),
        ))));
    }
    let mut body = vec![0u8; len as usize - 4];
    match read_exact_retrying(stream, &mut body) {
        Ok(()) => Ok(Ok(body)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Err(ScramFailure::ClientGone)),
        Err(e) => Err(e),
    }
}

/// Splits SASLInitialResponse into mechanism and client-first message.
fn parse_initial_response(body: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
    let mut r = BodyReader::new(body);
    let mechanism = r
        .cstr()
        .map_err(|_| ScramError::Malformed("invalid SASLInitialResponse".into()))?;
    let len = r
        .i32()
        .map_err(|_| ScramError::Malformed("invalid SASLInitialResponse".into()))?;
    let data = if len < 0 {
        Vec::new()
    } else {
        r.bytes(len as usize)
            .map_err(|_| ScramError::Malformed("invalid SASLInitialResponse".into()))?
            .to_vec()
    };
    Ok((mechanism, data))
}

/// The verifier a TCP client must prove it knows, and whether knowing it
/// lets the client replicate: a client asking for `replication` uses the
/// replication role's verifier when one is configured; everyone else the
/// login verifier. A verifier that does not parse counts as none (the
/// postmaster refuses to start with one that does not).
fn tcp_verifier(params: &ServerParams, replication: bool) -> (Option<scram::Verifier>, bool) {
    let parse = |t: &Option<String>| t.as_deref().and_then(|t| scram::Verifier::parse(t).ok());
    if replication {
        if let Some(v) = parse(&params.replication_password) {
            return (Some(v), true);
        }
    }
    (parse(&params.password), false)
}

/// `N` random bytes from the kernel's CSPRNG (`/dev/urandom`): the one
/// source of randomness of the server (SCRAM nonces and salts, cancel
/// keys).
pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

fn scram_exchange<S: Read + Write>(
    stream: &mut S,
    verifier: Option<&scram::Verifier>,
) -> io::Result<Result<(), ScramFailure>> {
    let mut out = Out::new();
    out.authentication_sasl(&[scram::MECHANISM]);
    send(stream, out.bytes())?;
    let body = match read_password_message(stream)? {
        Ok(b) => b,
        Err(f) => return Ok(Err(f)),
    };
    let (mechanism, client_first) = match parse_initial_response(&body) {
        Ok(x) => x,
        Err(e) => return Ok(Err(ScramFailure::Refused(e))),
    };
    if mechanism != scram::MECHANISM {
        let e = ScramError::Malformed(
            "client selected an invalid SASL authentication mechanism".into(),
        );
        return Ok(Err(ScramFailure::Refused(e)));
    }
    let (exchange, server_first) =
        match Exchange::start(&client_first, verifier, &random_bytes::<34>()?) {
            Ok(x) => x,
            Err(e) => return Ok(Err(ScramFailure::Refused(e))),
        };
    out.clear();
    out.authentication_sasl_continue(server_first.as_bytes());
    send(stream, out.bytes())?;
    let client_final = match read_password_message(stream)? {
        Ok(b) => b,
        Err(f) => return Ok(Err(f)),
    };
    match exchange.finish(&client_final) {
        Ok(server_final) => {
            out.clear();
            out.authentication_sasl_final(server_final.as_bytes());
            send(stream, out.bytes())?;
            Ok(Ok(()))
        }
        Err(e) => Ok(Err(ScramFailure::Refused(e))),
    }
}

/// The postmaster's refusal of a client it will not serve: reads the
/// start-up packet (answering SSL/GSS requests with 'N') so that the client
/// is listening, then sends the FATAL `error` (53300 "sorry, too many
/// clients already", 57P03 "the database system is starting up", ...).
/// A CancelRequest arriving here is dropped.
pub fn reject_with<S: Read + Write>(stream: &mut S, error: &SqlError) -> io::Result<()> {
    match read_first_packet(stream)? {
        FirstPacket::Startup { .. } => send_error(stream, error),
        FirstPacket::Cancel { .. } | FirstPacket::Invalid => Ok(()),
    }
}

/// An ErrorResponse as bytes, for a refusal the postmaster writes itself
/// (one non-blocking write, without reading the start-up packet) when it
/// will not fork a child for the client.
pub fn error_response_bytes(error: &SqlError) -> Vec<u8> {
    let mut out = Out::new();
    out.error_or_notice(error);
    out.bytes().to_vec()
}

/// Sends an ErrorResponse on a connection whose start-up already finished
/// (e.g. no proc slot was free after authentication).
pub fn send_error_after_startup<S: Write>(stream: &mut S, error: &SqlError) -> io::Result<()> {
    send_error(stream, error)
}

/// The bytes PostgreSQL's `quickdie` sends a client when the postmaster
/// orders a backend to quit after another process crashed (a WARNING
/// NoticeResponse, 57P02). Prepared ahead so that a signal handler can
/// write them with one `write(2)`.
pub fn crash_notice_bytes() -> Vec<u8> {
    let mut out = crate::codec::Out::new();
    out.error_or_notice(&crate::serve::crash_notice());
    out.bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// An in-memory duplex stream: reads from `input`, collects writes.
    struct Duplex {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Duplex {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Duplex {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn replication_parameter_as_postgresql_reads_it() {
        let mode = |v: &str| {
            let params = vec![
                ("user".into(), "u".into()),
                ("replication".into(), v.into()),
            ];
            interpret_startup(PROTOCOL_3_0, params).map(|a| a.info.replication)
        };
        assert_eq!(mode("true").unwrap(), Some(ReplicationMode::Physical));
        assert_eq!(mode("1").unwrap(), Some(ReplicationMode::Physical));
        assert_eq!(mode("Database").unwrap(), Some(ReplicationMode::Database));
        assert_eq!(mode("off").unwrap(), None);
        assert_eq!(mode("maybe").unwrap_err().code, "22023");
    }

    #[test]
    fn only_the_replication_credential_or_the_owner_may_replicate() {
        let login = scram::Verifier::from_password("login", b"0123456789abcdef").to_string();
        let repl = scram::Verifier::from_password("repl", b"fedcba9876543210").to_string();
        let verifier = |params: &ServerParams, replication| {
            let (v, may) = tcp_verifier(params, replication);
            (v.map(|v| v.to_string()), may)
        };
        let plain = ServerParams::new(1, 2, Some(login.clone()));
        assert_eq!(verifier(&plain, false), (Some(login.clone()), false));
        assert_eq!(verifier(&plain, true), (Some(login.clone()), false));
        let both = plain.with_replication_password(Some(repl.clone()));
        assert_eq!(verifier(&both, false), (Some(login.clone()), false));
        assert_eq!(verifier(&both, true), (Some(repl), true));
        let mut info = StartupInfo {
            replication: Some(ReplicationMode::Physical),
            ..Default::default()
        };
        let e = replication_permitted(&info).unwrap_err();
        assert_eq!((e.severity, e.code), ("FATAL", "42501"));
        assert_eq!(
            e.message,
            "must be superuser or replication role to start walsender"
        );
        info.may_replicate = true;
        assert!(replication_permitted(&info).is_ok());
        info.may_replicate = false;
        info.replication = None;
        assert!(replication_permitted(&info).is_ok());
        // The Unix socket's peer is the server's own user: it may.
        match unix_startup(packet(PROTOCOL_3_0, b"user\0anyone\0replication\0true\0\0")).0 {
            Startup::Ready(info) => assert!(info.may_replicate),
            other => panic!("{other:?}"),
        }
    }

    fn packet(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut v = ((rest.len() + 8) as i32).to_be_bytes().to_vec();
        v.extend_from_slice(&code.to_be_bytes());
        v.extend_from_slice(rest);
        v
    }

    fn duplex(input: Vec<u8>) -> Duplex {
        Duplex {
            input: Cursor::new(input),
            output: Vec::new(),
        }
    }

    const UNIX_OK: Transport = Transport::Unix {
        peer_uid: Some(7),
        server_uid: 7,
    };

    /// Runs the startup of a Unix-socket client whose peer is the server's
    /// own user on `input`: the outcome and what the server wrote.
    fn unix_startup(input: Vec<u8>) -> (Startup, Vec<u8>) {
        let mut s = duplex(input);
        let r = startup(&mut s, &UNIX_OK, &ServerParams::new(1, 2, None)).unwrap();
        (r, s.output)
    }

    /// The startup packet of user "u" with this `options` parameter.
    fn with_options(options: &str) -> Vec<u8> {
        packet(
            PROTOCOL_3_0,
            format!("user\0u\0options\0{options}\0\0").as_bytes(),
        )
    }

    /// What the server made of a start-up with this `options` parameter.
    fn ready_with_options(options: &str) -> StartupInfo {
        match unix_startup(with_options(options)).0 {
            Startup::Ready(info) => info,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ssl_refused_then_startup_greets() {
        let mut input = packet(SSL_REQUEST_CODE, b"");
        input.extend(packet(
            PROTOCOL_3_0,
            b"user\0bob\0application_name\0app\0\0",
        ));
        let mut s = duplex(input);
        let r = startup(&mut s, &UNIX_OK, &ServerParams::new(42, 99, None)).unwrap();
        let Startup::Ready(info) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            (
                info.user.as_str(),
                info.database.as_str(),
                info.application_name.as_str()
            ),
            ("bob", "bob", "app")
        );
        assert_eq!(s.output[0], b'N');
        assert_eq!(&s.output[1..10], b"R\0\0\0\x08\0\0\0\0");
        assert!(s
            .output
            .ends_with(b"K\0\0\0\x0c\0\0\0\x2a\0\0\0\x63Z\0\0\0\x05I"));
        let text = String::from_utf8_lossy(&s.output);
        assert!(text.contains("server_version\x0015.0 (walshm)\0"));
        assert!(text.contains("application_name\0app\0"));
    }

    #[test]
    fn cancel_request_is_returned() {
        let mut rest = 5i32.to_be_bytes().to_vec();
        rest.extend(6i32.to_be_bytes());
        assert_eq!(
            unix_startup(packet(CANCEL_REQUEST_CODE, &rest)).0,
            Startup::Cancel { pid: 5, key: 6 }
        );
    }

    #[test]
    fn wrong_peer_is_refused_with_28000() {
        let mut s = duplex(packet(PROTOCOL_3_0, b"user\0bob\0\0"));
        let t = Transport::Unix {
            peer_uid: Some(8),
            server_uid: 7,
        };
        assert_eq!(
            startup(&mut s, &t, &ServerParams::new(1, 2, None)).unwrap(),
            Startup::Rejected
        );
        let text = String::from_utf8_lossy(&s.output);
        assert!(
            text.starts_with('E')
                && text.contains("C28000\0")
                && text.contains("Peer authentication failed")
        );
    }

    #[test]
    fn malformed_packets_are_refused() {
        let (r, output) = unix_startup(packet(PROTOCOL_3_0, b"user\0bob"));
        assert_eq!(r, Startup::Rejected);
        assert!(String::from_utf8_lossy(&output).contains("C08P01\0"));
        let (r, output) = unix_startup(packet(2 << 16, b"user\0bob\0\0"));
        assert_eq!(r, Startup::Rejected);
        assert!(String::from_utf8_lossy(&output).contains("C0A000\0"));
        let (r, _) = unix_startup(vec![0, 0, 0, 3]);
        assert_eq!(r, Startup::Rejected);
        let (r, output) = unix_startup(packet(PROTOCOL_3_0, b"database\0x\0\0"));
        assert_eq!(r, Startup::Rejected);
        assert!(String::from_utf8_lossy(&output).contains("C28000\0"));
    }

    #[test]
    fn options_carry_synchronous_commit() {
        let info = ready_with_options("-c synchronous_commit=off");
        assert_eq!(info.synchronous_commit, Some(false));
        assert_eq!(info.synchronous_commit_level, Some("off"));
    }

    #[test]
    fn options_carry_the_synchronous_commit_level() {
        let info = ready_with_options("-c synchronous_commit=Remote_Write");
        assert_eq!(info.synchronous_commit, Some(true));
        assert_eq!(info.synchronous_commit_level, Some("remote_write"));
    }

    #[test]
    fn a_bad_synchronous_commit_option_is_fatal_22023() {
        let (r, output) = unix_startup(with_options("-c synchronous_commit=sometimes"));
        assert_eq!(r, Startup::Rejected);
        let reply = String::from_utf8_lossy(&output);
        assert!(
            reply.contains("SFATAL\0") && reply.contains("C22023\0"),
            "{reply}"
        );
        assert!(
            reply.contains("\"synchronous_commit\": \"sometimes\""),
            "{reply}"
        );
    }

    #[test]
    fn minor_version_gets_negotiation() {
        let (r, output) = unix_startup(packet(PROTOCOL_3_0 | 2, b"user\0u\0_pq_.x\0y\0\0"));
        assert!(matches!(r, Startup::Ready(_)));
        assert_eq!(output[0], b'v');
        assert!(String::from_utf8_lossy(&output).contains("_pq_.x\0"));
    }

    #[test]
    fn too_many_clients() {
        let mut s = duplex(packet(PROTOCOL_3_0, b"user\0u\0\0"));
        let too_many = SqlError::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            "sorry, too many clients already",
        );
        reject_with(&mut s, &too_many).unwrap();
        let text = String::from_utf8_lossy(&s.output);
        assert!(text.contains("C53300\0") && text.contains("sorry, too many clients already"));
    }
}
