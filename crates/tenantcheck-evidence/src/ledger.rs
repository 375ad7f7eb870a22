//! The ledger: what a run's transcript lines show, case by case, by one fold over
//! them.
//!
//! Every exchange line is read once, in transcript order: its answer is scanned for
//! other tenants' canaries ([`crate::scan`]) and judged against every request before
//! it ([`crate::passage`], [`crate::provenance`]), its request's text joins those the
//! later answers are judged against, and a 3xx is a redirect. What it showed is laid
//! on the case that sent it, and on every case a `cite` line names it for.
//!
//! The run feeds its ledger each line as it records it; `verify` reads the transcript
//! into a fresh one, line by line, knowing every canary the report says was issued; a
//! resumed run folds the old lines into the ledger it goes on with
//! ([`Ledger::fold`]). The three read the same lines with this code, so they see the
//! same leaks, passages and redirects by construction: `verify` then holds the
//! report's findings to [`Ledger::evidence`].

use crate::canary::{Canary, Fragment, Marks};
use crate::exchange::Exchange;
use crate::outcome::LeakEvidence;
use crate::scan::{GrowingScanner, Hit};
use std::collections::{BTreeMap, HashMap};

/// An answer that redirected instead of answering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// The tenant that asked.
    pub tenant: String,
    /// Its transcript line.
    pub seq: u64,
    /// The 3xx status.
    pub status: u16,
    /// Where it pointed (the `Location` header), if anywhere.
    pub location: Option<String>,
}

/// A case judged exchanges another case sent (a `cite` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Citation {
    /// The case that judged them.
    pub judge: String,
    /// The case that sent them.
    pub sender: String,
    /// Their transcript lines.
    pub lines: Vec<u64>,
}

/// What one exchange line showed, which its case and every case citing it answer for.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The case that sent it.
    pub case: String,
    /// The tenant it was recorded as.
    pub tenant: String,
    /// Other tenants' canaries in what came back.
    pub canaries: Vec<LeakEvidence>,
    /// Another request's text in the answer: a stretch of another tenant's words
    /// (fragment `text`) first, then sentences of another request (`passage`).
    pub passages: Vec<LeakEvidence>,
    /// The answer redirected.
    pub redirect: Option<Redirect>,
}

/// What the answers a case sent or cited showed, in transcript order of their laying.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    /// Other tenants' canaries.
    pub leaks: Vec<LeakEvidence>,
    /// Another request's text (answers not bound to their request).
    pub misrouted: Vec<LeakEvidence>,
    /// Answers that redirected.
    pub redirects: Vec<Redirect>,
}

impl Evidence {
    fn lay(&mut self, seen: &Seen) {
        self.leaks.extend(seen.canaries.iter().cloned());
        self.misrouted.extend(seen.passages.iter().cloned());
        self.redirects.extend(seen.redirect.clone());
    }
}

/// A line a `cite` line names that is no earlier exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("#{0}, which is no earlier exchange")]
pub struct NoSuchLine(pub u64);

/// The canaries issued, and which request carried each first.
#[derive(Default)]
struct Canaries {
    issued: Vec<Canary>,
    /// Canary id → its index in `issued`.
    index: HashMap<String, usize>,
    /// Canary id → the transcript line of the first request that carried it.
    seeded_in: HashMap<String, u64>,
    /// Issued canaries no request has carried yet (indices into `issued`).
    pending: Vec<usize>,
    /// Canaries issued or known that no request of the lines read so far carried
    /// (indices into `issued`): not yet in `holders`.
    unsent: Vec<usize>,
    /// The canaries some request of the lines read so far carried, by their holders'
    /// names: what an answer's sighted names are judged against
    /// ([`crate::holder`]); the same in the run and in `verify`, whatever each knew of
    /// the canaries to come.
    holders: crate::holder::Holders,
}

/// What the transcript's lines show, case by case ([the module](self)).
pub struct Ledger {
    canaries: Canaries,
    scanner: GrowingScanner,
    passages: crate::passage::Passages,
    lines: BTreeMap<u64, Seen>,
    cases: BTreeMap<String, Evidence>,
    cited: Vec<Citation>,
    /// Answers with HTTP status 429.
    rate_limited: u64,
}

impl Ledger {
    /// An empty ledger for a run of these tenants (labels, in profile order), whose
    /// invented names are `marks`.
    pub fn new(labels: &[String], marks: &[Marks]) -> Self {
        Ledger {
            canaries: Canaries::default(),
            scanner: GrowingScanner::new(marks),
            passages: crate::passage::Passages::new(labels).with_marks(marks),
            lines: BTreeMap::new(),
            cases: BTreeMap::new(),
            cited: Vec::new(),
            rate_limited: 0,
        }
    }

    /// Reads one transcript line: an exchange is judged ([`Ledger::exchange`]), a
    /// citation laid on its case ([`Ledger::cite`]); other lines change nothing.
    pub fn fold(&mut self, line: &crate::transcript::Line) -> Result<(), NoSuchLine> {
        use crate::transcript::Line;
        match line {
            Line::Exchange {
                seq,
                case,
                tenant,
                exchange,
            } => {
                self.exchange(*seq, case, tenant, exchange);
                Ok(())
            }
            Line::Cite { case, cites } => self.cite(case, cites),
            _ => Ok(()),
        }
    }

    /// Issues `canary`: every later answer is scanned for it, and the next request to
    /// carry it seeds it ([`Ledger::seed`]), again when it was issued before (a case
    /// run again). Returns whether it was new.
    pub fn issue(&mut self, canary: Canary) -> bool {
        let (i, new) = self.add(canary);
        if !self.canaries.pending.contains(&i) {
            self.canaries.pending.push(i);
        }
        new
    }

    /// Knows `canary`, issued elsewhere (the part of a run before it was resumed, or
    /// the report `verify` checks): every later answer is scanned for it, and no
    /// request seeds it. Returns whether it was new.
    pub fn know(&mut self, canary: Canary) -> bool {
        self.add(canary).1
    }

    /// Adds `canary` to the scanner unless it has it; its index in `issued`, and
    /// whether it was new.
    fn add(&mut self, canary: Canary) -> (usize, bool) {
        if let Some(&i) = self.canaries.index.get(&canary.id) {
            return (i, false);
        }
        let i = self.canaries.issued.len();
        self.canaries.index.insert(canary.id.clone(), i);
        self.scanner.add(canary.clone());
        self.canaries.issued.push(canary);
        self.canaries.unsent.push(i);
        (i, true)
    }

    /// Every canary issued, in the order issued.
    pub fn issued(&self) -> &[Canary] {
        &self.canaries.issued
    }

    /// Notes which issued canaries the request recorded at `seq` carried, in its
    /// messages' texts: the first request to carry one seeded it.
    pub fn seed<'a>(&mut self, seq: u64, messages: impl IntoIterator<Item = &'a str>) {
        let Canaries {
            issued,
            seeded_in,
            pending,
            ..
        } = &mut self.canaries;
        if pending.is_empty() {
            return;
        }
        let carried: Vec<crate::canary::Carried<'_>> = messages.into_iter().map(crate::canary::Carried::of).collect();
        pending.retain(|&i| {
            let c = &issued[i];
            let held = carried.iter().any(|m| m.holds(c));
            if held {
                seeded_in.insert(c.id.clone(), seq);
            }
            !held
        });
    }

    /// The transcript line of the first request that carried canary `id`.
    pub fn seeded_in(&self, id: &str) -> Option<u64> {
        self.canaries.seeded_in.get(id).copied()
    }

    /// Canaries of the run not owned by `recipient` found in `text`.
    pub fn scan(&mut self, text: &str, recipient: &str) -> Vec<Hit> {
        self.scanner.scan(text, recipient)
    }

    /// Builds the scanner over every canary issued or known so far, so that
    /// [`Ledger::scan_settled`] may scan through a shared borrow.
    pub fn settle(&mut self) {
        self.scanner.settle();
    }

    /// As [`Ledger::scan`] through a shared borrow, after [`Ledger::settle`] and
    /// before the next canary: what `verify` checks after the last line with the one
    /// scanner the fold used (a second scanner over a million-token run's canaries
    /// would double its peak memory).
    ///
    /// # Panics
    ///
    /// When a canary was issued or known since the ledger was settled.
    pub fn scan_settled(&self, text: &str, recipient: &str) -> Vec<Hit> {
        self.scanner.scan_settled(text, recipient)
    }

    /// The evidence of `hit`, found in the answer recorded at `returned_in` to
    /// `recipient`, with the line of the request that carried the canary first.
    pub fn leak_evidence(&self, hit: Hit, recipient: &str, returned_in: u64) -> LeakEvidence {
        LeakEvidence {
            seeded_in: self.seeded_in(&hit.id),
            canary_id: hit.id,
            owner: hit.owner,
            recipient: recipient.to_owned(),
            fragment: hit.fragment,
            matched: hit.matched,
            excerpt: hit.excerpt,
            returned_in,
            words: None,
        }
    }

    /// Reads the exchange recorded at `seq` under `case` as `tenant`: scans its
    /// answer for other tenants' canaries, judges it against every request before it
    /// and adds its request's text, notes a redirect or a rate limit, and lays what it
    /// showed on `case`.
    pub fn exchange(&mut self, seq: u64, case: &str, tenant: &str, exchange: &Exchange) -> &Seen {
        self.rate_limited += u64::from(exchange.status == Some(429));
        self.sent(&exchange.request);
        let returned = exchange.returned_text();
        let hits = self.scanner.scan(&returned, tenant);
        let mut canaries: Vec<LeakEvidence> = hits
            .into_iter()
            .map(|hit| self.leak_evidence(hit, tenant, seq))
            .collect();
        canaries.extend(self.sighted(&returned, tenant, seq, &canaries));
        let judged = self.passages.judge(seq, tenant, exchange);
        let text = judged.text.map(|hit| LeakEvidence {
            canary_id: hit.id(),
            owner: hit.owner.clone(),
            recipient: tenant.to_owned(),
            fragment: Fragment::Text,
            excerpt: hit.text.clone(),
            matched: hit.text.clone(),
            seeded_in: Some(hit.source),
            returned_in: seq,
            words: Some(hit.into()),
        });
        let passage = judged.passage.map(|hit| LeakEvidence {
            canary_id: hit.id(),
            owner: hit.owner,
            recipient: tenant.to_owned(),
            fragment: Fragment::Passage,
            excerpt: hit.passage.clone(),
            matched: hit.passage,
            seeded_in: Some(hit.source),
            returned_in: seq,
            words: None,
        });
        let redirect = match exchange.status {
            Some(status @ 300..=399) => Some(Redirect {
                tenant: tenant.to_owned(),
                seq,
                status,
                location: exchange.headers.get("location").cloned(),
            }),
            _ => None,
        };
        let seen = Seen {
            case: case.to_owned(),
            tenant: tenant.to_owned(),
            canaries,
            passages: text.into_iter().chain(passage).collect(),
            redirect,
        };
        self.cases.entry(case.to_owned()).or_default().lay(&seen);
        self.lines.insert(seq, seen);
        &self.lines[&seq]
    }

    /// Moves the canaries `request` carried (its account numbers and codes, in any
    /// string of its body) from unsent to the holders an answer's names are judged
    /// against.
    fn sent(&mut self, request: &crate::exchange::RecordedRequest) {
        let Canaries {
            issued,
            unsent,
            holders,
            ..
        } = &mut self.canaries;
        if unsent.is_empty() || request.body.is_none() {
            return;
        }
        let text = request.text();
        let carried = crate::canary::Carried::of(&text);
        unsent.retain(|&i| {
            let held = carried.holds(&issued[i]);
            if held {
                holders.add(issued[i].clone());
            }
            !held
        });
    }

    /// Other tenants' records the answer `returned` to `recipient` holds by their
    /// holders' names and what survives of them ([`crate::holder`]: a record re-set
    /// by a template, `PARK, Thea | acct ****2788 | gmail.com`), rare enough to name
    /// the holder; none of a canary the scan already found in it (`found`).
    fn sighted(&self, returned: &str, recipient: &str, seq: u64, found: &[LeakEvidence]) -> Vec<LeakEvidence> {
        let holders = &self.canaries.holders;
        if holders.is_empty() {
            return Vec::new();
        }
        crate::holder::attributed(
            holders.sightings_within(recipient, returned, 0, returned.len()),
            holders,
        )
        .into_iter()
        .filter(|s| {
            !found
                .iter()
                .any(|f| s.candidates.iter().any(|&i| holders.canary(i).id == f.canary_id))
        })
        .map(|s| {
            let c = holders.canary(s.index);
            LeakEvidence {
                canary_id: c.id.clone(),
                owner: c.owner.clone(),
                recipient: recipient.to_owned(),
                fragment: Fragment::Name,
                matched: s.found.join(" / "),
                excerpt: s.excerpt,
                seeded_in: self.seeded_in(&c.id),
                returned_in: seq,
                words: Some(crate::outcome::WordMatch {
                    field: "returned text".to_owned(),
                    words: s.found.len(),
                    shingles: 0,
                    distinctive: s.found,
                    chance: s.chance,
                }),
            }
        })
        .collect()
    }

    /// Lays what the exchanges at `seqs` showed on `case`, which cites them: their
    /// leaks and redirects are its own from then on; the citation names the case that
    /// sent the first of them (none is kept when `seqs` is empty). Fails, laying
    /// nothing, when one is no earlier exchange.
    pub fn cite(&mut self, case: &str, seqs: &[u64]) -> Result<(), NoSuchLine> {
        if let Some(&missing) = seqs.iter().find(|s| !self.lines.contains_key(s)) {
            return Err(NoSuchLine(missing));
        }
        let Some(first) = seqs.first() else {
            return Ok(());
        };
        let evidence = self.cases.entry(case.to_owned()).or_default();
        for seq in seqs {
            evidence.lay(&self.lines[seq]);
        }
        let sender = self.lines[first].case.clone();
        self.cited.push(Citation {
            judge: case.to_owned(),
            sender,
            lines: seqs.to_vec(),
        });
        Ok(())
    }

    /// What the answers `case` sent or cited showed.
    pub fn evidence(&self, case: &str) -> Evidence {
        self.cases.get(case).cloned().unwrap_or_default()
    }

    /// The cases with any evidence, and theirs.
    pub fn cases(&self) -> impl Iterator<Item = (&str, &Evidence)> {
        self.cases.iter().map(|(c, e)| (c.as_str(), e))
    }

    /// What the exchange at `seq` showed.
    pub fn line(&self, seq: u64) -> Option<&Seen> {
        self.lines.get(&seq)
    }

    /// The exchange lines read, in order.
    pub fn lines(&self) -> impl Iterator<Item = (u64, &Seen)> {
        self.lines.iter().map(|(s, l)| (*s, l))
    }

    /// Every citation, in the order read.
    pub fn cited(&self) -> &[Citation] {
        &self.cited
    }

    /// The answers read with HTTP status 429 (a rate limit), every case's.
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::{Form, RunSecret};
    use crate::exchange::{Exchange, RecordedRequest};

    fn answer(prompt: &str, content: &str, status: u16) -> Exchange {
        Exchange {
            request: RecordedRequest {
                body: Some(serde_json::json!({"messages": [{"role": "user", "content": prompt}]})),
                ..RecordedRequest::default()
            },
            status: Some(status),
            content: content.to_owned(),
            ..Exchange::default()
        }
    }

    fn ledger(secret: &RunSecret) -> Ledger {
        let labels = vec!["a".to_owned(), "b".to_owned()];
        let marks: Vec<_> = labels.iter().map(|t| secret.marks(t)).collect();
        Ledger::new(&labels, &marks)
    }

    #[test]
    fn a_canary_seeded_by_one_tenant_and_returned_to_another_is_laid_on_the_case_and_every_citer() {
        let secret = RunSecret::from_hex(&"07".repeat(32)).unwrap();
        let mut l = ledger(&secret);
        let c = secret.canary("a", "iso", 0);
        assert!(l.issue(c.clone()));
        assert!(!l.issue(c.clone()), "a canary is issued once");
        let prompt = format!("Remember {}", c.text(Form::Record));
        l.exchange(1, "iso", "a", &answer(&prompt, "noted", 200));
        l.seed(1, [prompt.as_str()]);
        assert_eq!(l.seeded_in(&c.id), Some(1));
        let seen = l.exchange(
            2,
            "iso",
            "b",
            &answer("What do you remember?", &c.text(Form::Record), 200),
        );
        assert_eq!(seen.canaries.len(), 1, "{seen:?}");
        assert_eq!(seen.canaries[0].seeded_in, Some(1));
        assert_eq!(seen.canaries[0].owner, "a");
        let own = l.exchange(3, "iso", "a", &answer("And you?", &c.text(Form::Record), 200));
        assert!(own.canaries.is_empty(), "a tenant's own canary is no leak");
        assert_eq!(l.evidence("iso").leaks.len(), 1);
        assert!(l.evidence("other").leaks.is_empty());
        l.cite("other", &[2, 3]).expect("earlier lines");
        assert_eq!(l.evidence("other").leaks, l.evidence("iso").leaks);
        assert_eq!(
            l.cited(),
            [Citation {
                judge: "other".into(),
                sender: "iso".into(),
                lines: vec![2, 3]
            }]
        );
        assert_eq!(l.cite("other", &[2, 9]), Err(NoSuchLine(9)));
        assert_eq!(l.cited().len(), 1, "a failed citation lays nothing");
    }

    #[test]
    fn a_redirect_is_laid_on_its_case_with_where_it_pointed() {
        let secret = RunSecret::from_hex(&"08".repeat(32)).unwrap();
        let mut l = ledger(&secret);
        let mut ex = answer("hi", "", 302);
        ex.headers.insert("location".into(), "http://127.0.0.1:1/x".into());
        l.exchange(4, "net", "b", &ex);
        l.exchange(5, "net", "b", &answer("hi", "hello", 200));
        l.exchange(6, "net", "b", &answer("hi", "", 429));
        assert_eq!(l.rate_limited(), 1);
        assert_eq!(
            l.evidence("net").redirects,
            [Redirect {
                tenant: "b".into(),
                seq: 4,
                status: 302,
                location: Some("http://127.0.0.1:1/x".into())
            }]
        );
    }

    #[test]
    fn folding_a_transcript_gives_what_the_run_fed_line_by_line() {
        let secret = RunSecret::from_hex(&"09".repeat(32)).unwrap();
        let c = secret.canary("a", "iso", 0);
        let prompt = format!("Remember {}", c.text(Form::Record));
        let lines = [
            ("iso", "a", answer(&prompt, "noted", 200)),
            ("iso", "b", answer("What do you remember?", &c.text(Form::Record), 200)),
        ];
        let mut fed = ledger(&secret);
        fed.issue(c.clone());
        let mut transcript = Vec::new();
        for (seq, (case, tenant, ex)) in (1..).zip(&lines) {
            let line =
                serde_json::json!({"kind": "exchange", "seq": seq, "case": case, "tenant": tenant, "exchange": ex});
            transcript.extend(serde_json::to_vec(&line).unwrap());
            transcript.push(b'\n');
            fed.exchange(seq, case, tenant, ex);
        }
        transcript.extend(br#"{"kind":"cite","seq":3,"case":"other","cites":[2]}"#);
        fed.cite("other", &[2]).unwrap();
        let labels = vec!["a".to_owned(), "b".to_owned()];
        let marks: Vec<_> = labels.iter().map(|t| secret.marks(t)).collect();
        let mut read = Ledger::new(&labels, &marks);
        read.know(c);
        for line in crate::transcript::lines(&transcript) {
            read.fold(&line.unwrap()).unwrap();
        }
        for case in ["iso", "other"] {
            assert_eq!(read.evidence(case).leaks.len(), 1, "{case}");
            assert_eq!(
                read.evidence(case)
                    .leaks
                    .iter()
                    .map(|l| (l.returned_in, &l.canary_id))
                    .collect::<Vec<_>>(),
                fed.evidence(case)
                    .leaks
                    .iter()
                    .map(|l| (l.returned_in, &l.canary_id))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(read.cited(), fed.cited());
        assert_eq!(read.lines().count(), 2);
    }
}
