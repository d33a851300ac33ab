//! The extended query protocol's messages (Parse, Bind, Describe,
//! Execute) on a [`Connection`]: named statements and portals, the plan
//! cache, parameter decoding, result formats, and a portal's rows sent in
//! pieces of `max_rows`. Errors follow `serve`'s rule: after one, messages
//! are skipped until Sync.

use super::*;

impl<S: Read + Write> Connection<'_, S> {
    /// One message of the extended protocol other than Sync and Flush
    /// (Parse, Bind, Describe, Execute, Close); an error makes `dispatch`
    /// skip messages until Sync.
    pub(super) fn extended_message(&mut self, msg: FrontendMessage) -> Result<(), SqlError> {
        match msg {
            FrontendMessage::Parse {
                name,
                query,
                param_types,
            } => self.parse(&name, &query, &param_types),
            FrontendMessage::Bind {
                portal,
                statement,
                param_formats,
                params,
                result_formats,
            } => self.bind(
                &portal,
                &statement,
                &param_formats,
                &params,
                &result_formats,
            ),
            FrontendMessage::Describe { target, name } => self.describe(target, &name),
            FrontendMessage::Execute { portal, max_rows } => self.execute(&portal, max_rows),
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => self.statements.remove(&name).map(|_| ()),
                    Target::Portal => self.portals.remove(&name).map(|_| ()),
                };
                self.out.close_complete();
                Ok(())
            }
            // The other messages are dispatch's own.
            _ => Ok(()),
        }
    }

    pub(super) fn parse(
        &mut self,
        name: &str,
        query: &str,
        declared: &[u32],
    ) -> Result<(), SqlError> {
        if !name.is_empty() && self.statements.contains_key(name) {
            return Err(SqlError::error(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            ));
        }
        if let Some((analyzed, text)) = self.plans.extended(query, declared) {
            if self.tx == TxState::Failed && !analyzed.is_transaction_exit() {
                return Err(in_failed_transaction());
            }
            self.statements.insert(name, (analyzed, text));
            self.out.parse_complete();
            return Ok(());
        }
        let statements = parse_statements_within(query, self.session.memory_limit())?;
        if statements.len() > 1 {
            return Err(SqlError::syntax_error(
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let analyzed = match statements.first() {
            None => Analyzed {
                kind: Kind::Empty,
                param_types: declared
                    .iter()
                    .map(|&o| SqlType::from_oid(o).unwrap_or(SqlType::Text))
                    .collect(),
            },
            Some(stmt) => {
                if self.tx == TxState::Failed && !stmt.is_transaction_exit() {
                    return Err(in_failed_transaction());
                }
                analyze(stmt, declared, true)?
            }
        };
        let analyzed = Rc::new(analyzed);
        let cached = match analyzed.kind {
            Kind::Empty => None, // no failed-block check: not cached
            _ => self
                .plans
                .insert_extended(query, declared, analyzed.clone()),
        };
        let text = cached.unwrap_or_else(|| Rc::from(query));
        self.statements.insert(name, (analyzed, text));
        self.out.parse_complete();
        Ok(())
    }

    pub(super) fn bind(
        &mut self,
        portal: &str,
        statement: &str,
        param_formats: &[i16],
        raw_params: &[Option<Vec<u8>>],
        result_formats: &[i16],
    ) -> Result<(), SqlError> {
        let (stmt, query) = self
            .statements
            .get(statement)
            .cloned()
            .ok_or_else(|| statement_not_found(statement))?;
        let expected = stmt.param_types.len();
        if raw_params.len() != expected {
            return Err(SqlError::error(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement}\" requires {expected}",
                    raw_params.len()
                ),
            ));
        }
        let formats = expand_formats(param_formats, expected, "parameter")?;
        if self.tx == TxState::Failed && !stmt.is_transaction_exit() {
            return Err(in_failed_transaction());
        }
        let mut params = Vec::with_capacity(expected);
        for (i, raw) in raw_params.iter().enumerate() {
            params.push(decode_param(
                raw.as_deref(),
                stmt.param_types[i],
                formats[i],
                i,
            )?);
        }
        let ncols = stmt.columns().map_or(0, |c| c.len());
        let formats = expand_formats(result_formats, ncols, "result")?;
        if !portal.is_empty() && self.portals.contains_key(portal) {
            return Err(SqlError::error(
                sqlstate::DUPLICATE_CURSOR,
                format!("cursor \"{portal}\" already exists"),
            ));
        }
        self.portals.insert(
            portal,
            Portal {
                statement: stmt,
                query,
                params,
                formats,
                state: PortalState::Ready,
                pending: VecDeque::new(),
            },
        );
        self.out.bind_complete();
        Ok(())
    }

    pub(super) fn describe(&mut self, target: Target, name: &str) -> Result<(), SqlError> {
        let (stmt, formats) = match target {
            Target::Statement => {
                let (stmt, _) = self
                    .statements
                    .get(name)
                    .cloned()
                    .ok_or_else(|| statement_not_found(name))?;
                let oids: Vec<u32> = stmt.param_types.iter().map(|t| t.oid()).collect();
                self.out.parameter_description(&oids)?;
                (stmt, Vec::new())
            }
            Target::Portal => {
                let p = self
                    .portals
                    .get(name)
                    .ok_or_else(|| portal_not_found(name))?;
                (p.statement.clone(), p.formats.clone())
            }
        };
        match stmt.columns() {
            Some(columns) => self.out.row_description(&fields(&columns, &formats))?,
            None => self.out.no_data(),
        }
        Ok(())
    }

    pub(super) fn execute(&mut self, name: &str, max_rows: i32) -> Result<(), SqlError> {
        let p = self
            .portals
            .get(name)
            .ok_or_else(|| portal_not_found(name))?;
        let (stmt, query, params, formats, state) = (
            p.statement.clone(),
            p.query.clone(),
            p.params.clone(),
            p.formats.clone(),
            p.state,
        );
        if self.session.take_cancel() {
            return Err(query_canceled());
        }
        if self.tx == TxState::Failed && !stmt.is_transaction_exit() {
            return Err(in_failed_transaction());
        }
        let columns = stmt.columns();
        match (state, &columns) {
            (PortalState::Suspended, Some(columns)) => {
                return self.send_pending(name, &stmt, columns, &formats, max_rows)
            }
            (PortalState::Done, Some(_)) => {
                self.out.command_complete("SELECT 0");
                return Ok(());
            }
            (PortalState::Suspended | PortalState::Done, _) => {
                return Err(SqlError::error(
                    sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("portal \"{name}\" cannot be run"),
                ))
            }
            (PortalState::Ready, _) => {}
        }
        if stmt.kind == Kind::Empty {
            self.out.empty_query_response();
            self.set_portal_state(name, PortalState::Done);
            return Ok(());
        }
        self.session.report_activity(Some(&query), true);
        let Outcome { tag, rows } = self.run(&stmt, &params)?;
        match (rows, columns) {
            (Some(rows), Some(columns)) => {
                if let Some(p) = self.portals.get_mut(name) {
                    p.pending = rows.into();
                }
                self.send_pending(name, &stmt, &columns, &formats, max_rows)
            }
            _ => {
                self.out.command_complete(&tag);
                self.set_portal_state(name, PortalState::Done);
                Ok(())
            }
        }
    }

    /// Sends up to `max_rows` (0: all) of the portal's pending rows; a
    /// portal that reached its limit is suspended, else complete.
    pub(super) fn send_pending(
        &mut self,
        name: &str,
        stmt: &Analyzed,
        columns: &[Column],
        formats: &[i16],
        max_rows: i32,
    ) -> Result<(), SqlError> {
        let limit = usize::try_from(max_rows).ok().filter(|&n| n > 0);
        let mut sent = 0usize;
        while limit.is_none_or(|l| sent < l) {
            let next = self
                .portals
                .get_mut(name)
                .and_then(|p| p.pending.pop_front());
            let Some(row) = next else { break };
            self.send_row(row, columns, formats)?;
            sent += 1;
        }
        if limit == Some(sent) {
            self.out.portal_suspended();
            self.set_portal_state(name, PortalState::Suspended);
            return Ok(());
        }
        let tag = match stmt.kind {
            Kind::Utility(Utility::Show(_)) | Kind::ShowAll => "SHOW".to_string(),
            _ => format!("SELECT {sent}"),
        };
        self.out.command_complete(&tag);
        self.set_portal_state(name, PortalState::Done);
        Ok(())
    }

    pub(super) fn set_portal_state(&mut self, name: &str, state: PortalState) {
        if let Some(p) = self.portals.get_mut(name) {
            p.state = state;
        }
    }

    // ---- statement execution ----
}
