//! A minimal PostgreSQL client for the tail benchmark's producers: start-up
//! over a Unix socket (trust or walshm's local peer authentication),
//! simple Query, read until ReadyForQuery. No SSL, no password: the
//! servers the benchmark starts itself accept the socket's user.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// One connection.
pub struct Conn {
    s: UnixStream,
}

fn put_cstr(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    b.push(0);
}

impl Conn {
    /// Connects to `DIR/.s.PGSQL.PORT` as `user` to database `db`.
    pub fn connect(socket_dir: &Path, port: u16, user: &str, db: &str) -> Result<Conn, String> {
        let path = socket_dir.join(format!(".s.PGSQL.{port}"));
        let s = UnixStream::connect(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut body = 196608i32.to_be_bytes().to_vec();
        for (k, v) in [("user", user), ("database", db)] {
            put_cstr(&mut body, k);
            put_cstr(&mut body, v);
        }
        body.push(0);
        let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        msg.extend_from_slice(&body);
        let mut c = Conn { s };
        c.s.write_all(&msg).map_err(|e| e.to_string())?;
        c.until_ready().map(|_| c)
    }

    fn read_msg(&mut self) -> Result<(u8, Vec<u8>), String> {
        let mut head = [0u8; 5];
        self.s.read_exact(&mut head).map_err(|e| e.to_string())?;
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = usize::try_from(len - 4).map_err(|_| "bad message length".to_string())?;
        let mut body = vec![0u8; len];
        self.s.read_exact(&mut body).map_err(|e| e.to_string())?;
        Ok((head[0], body))
    }

    /// Reads until ReadyForQuery; the first error's message, if any.
    fn until_ready(&mut self) -> Result<(), String> {
        let mut error = None;
        loop {
            match self.read_msg()? {
                (b'Z', _) => return error.map_or(Ok(()), Err),
                (b'E', body) => {
                    let text = String::from_utf8_lossy(&body).replace('\0', " ");
                    error.get_or_insert(text);
                }
                (b'R', body) if body.get(..4) != Some(&[0, 0, 0, 0]) => {
                    return Err("the server asks for a password".into())
                }
                _ => {}
            }
        }
    }

    /// Runs `sql` (simple Query) and waits for its end.
    pub fn query(&mut self, sql: &str) -> Result<(), String> {
        self.send_query(sql)?;
        self.until_ready()
    }

    /// Runs `sql` and returns the first column of its first row.
    pub fn query_one(&mut self, sql: &str) -> Result<String, String> {
        self.send_query(sql)?;
        let mut value = None;
        let mut error = None;
        loop {
            match self.read_msg()? {
                (b'Z', _) => break,
                (b'D', body) if value.is_none() => value = first_column(&body),
                (b'E', body) => {
                    error.get_or_insert(String::from_utf8_lossy(&body).replace('\0', " "));
                }
                _ => {}
            }
        }
        match (error, value) {
            (Some(e), _) => Err(e),
            (None, Some(v)) => Ok(v),
            (None, None) => Err(format!("no row from {sql}")),
        }
    }

    fn send_query(&mut self, sql: &str) -> Result<(), String> {
        let mut body = Vec::with_capacity(sql.len() + 1);
        put_cstr(&mut body, sql);
        let mut msg = vec![b'Q'];
        msg.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        msg.extend_from_slice(&body);
        self.s.write_all(&msg).map_err(|e| e.to_string())
    }
}

/// The first column of a DataRow body (text format), None if NULL.
fn first_column(body: &[u8]) -> Option<String> {
    let len = i32::from_be_bytes(body.get(2..6)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    Some(String::from_utf8_lossy(body.get(6..6 + len)?).into_owned())
}
