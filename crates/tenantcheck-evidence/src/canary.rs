//! [`Canary`]: an unguessable marker issued to one tenant, derived from the
//! [`RunSecret`].
//!
//! A canary looks like an ordinary customer record, not like a test marker, so that a
//! vendor cannot filter test traffic:
//!
//! > Customer record: Maria Keller, email maria.keller48213@posteo.de, account
//! > 3391 0048 2215, note: prefers amber parcels delivered to Lisbon.
//!
//! The record's label ("Customer record:", "Client file:", ...) is drawn per run
//! ([`RECORD_LABELS`]), so that no fixed words mark a run's records.
//!
//! Each field is drawn from SHA-256 over the run secret, the owning tenant, the case
//! and an index, so anyone holding the revealed secret can re-derive every canary of a
//! run, and nobody without it can guess one. Entropy per canary: given name 6 bits,
//! family name 6, e-mail digits 16.6, domain 4, account number 39.9, note 18: about
//! 90 bits ([`ENTROPY_BITS`]). The scanner looks for the whole record and for the two
//! fragments that are distinctive on their own (at least 32 bits each): the account
//! number (39.9 bits) and the e-mail address (32.6 bits).
//!
//! Each canary also has a *code*, a second form for models that do not copy a whole
//! record (the 135M model of CI's engine mangles long records but copies short
//! code-word tokens): a word and eight digits, `AMBER-50332459` (6 + 26.6 = 32.6 bits),
//! drawn apart from the record's fields. A prompt carries one form ([`Form`]); the
//! scanner looks for both.
//!
//! A tenant's prose is identifiable too: the filler of its prompts is strewn with
//! [`Marks`], invented names drawn for that tenant from the run secret, two in every
//! sentence.

use sha2::{Digest, Sha256};
use std::fmt;

/// Bits of entropy in one canary (see the module documentation).
pub const ENTROPY_BITS: f64 = 6.0 + 6.0 + 16.61 + 4.0 + 39.86 + 18.0;
const _: () = assert!(ENTROPY_BITS >= 64.0, "a canary needs at least 64 bits");

/// The per-run secret every canary is derived from: 32 bytes from the operating
/// system's CSPRNG.
#[derive(Clone, PartialEq, Eq)]
pub struct RunSecret([u8; 32]);

impl RunSecret {
    /// A fresh secret from the operating system's CSPRNG, with no challenge.
    pub fn generate() -> Self {
        Self::derive(&crate::random_bytes(), &[])
    }

    /// The secret of a run: SHA-256 over a fresh random `seed` and the buyer's
    /// `challenge` (empty when none was given). Revealing the seed lets anyone re-derive
    /// the secret; mixing the challenge in shows that the run's canaries were made
    /// after the buyer chose it.
    pub fn derive(seed: &[u8; 32], challenge: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(b"tenantcheck/run-secret/v1\0");
        h.update(seed);
        h.update((challenge.len() as u64).to_be_bytes());
        h.update(challenge);
        RunSecret(h.finalize().into())
    }

    /// The secret of a run that entered a transparency log: as [`RunSecret::derive`],
    /// with the start entry's log index and the root hash of the checkpoint that
    /// includes it mixed in. That root could not be known before the entry was logged,
    /// so no canary, prompt or request of the run could have been made before it.
    pub fn derive_logged(seed: &[u8; 32], challenge: &[u8], log_index: u64, root: &[u8; 32]) -> Self {
        let mut h = Sha256::new();
        h.update(b"tenantcheck/run-secret/v2-logged\0");
        h.update(seed);
        h.update((challenge.len() as u64).to_be_bytes());
        h.update(challenge);
        h.update(log_index.to_be_bytes());
        h.update(root);
        RunSecret(h.finalize().into())
    }

    /// A secret from its hex form (as revealed in a report).
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(RunSecret(out))
    }

    /// The secret in hex.
    pub fn to_hex(&self) -> String {
        crate::hex(&self.0)
    }

    /// A commitment to the secret, recorded before the first request and checkable
    /// once the secret is revealed.
    pub fn commitment(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"tenantcheck/run-secret-commitment/v1\0");
        h.update(self.0);
        crate::hex(&h.finalize())
    }

    /// The canary number `index` of tenant `owner` in case `case`.
    pub fn canary(&self, owner: &str, case: &str, index: u32) -> Canary {
        let d = self.expand(b"tenantcheck/canary/v1\0", owner, case, index);
        let word = |i: usize| u64::from_be_bytes(d[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (w0, w1, w2, w3) = (word(0), word(1), word(2), word(3));
        let pick = |list: &'static [&'static str], bits: u64| list[(bits as usize) % list.len()];
        let given = pick(GIVEN, w0);
        let family = pick(FAMILY, w0 >> 6);
        let domain = pick(DOMAINS, w0 >> 12);
        let email_digits = w1 % 100_000;
        let account = w2 % 1_000_000_000_000;
        let note = format!(
            "prefers {} {} delivered to {}",
            pick(ADJECTIVES, w3),
            pick(GOODS, w3 >> 6),
            pick(CITIES, w3 >> 12)
        );
        Canary {
            label: self.pick("record", RECORD_LABELS),
            id: format!("{owner}/{case}/{index}"),
            owner: owner.to_owned(),
            name: format!("{given} {family}"),
            email: format!(
                "{}.{}{email_digits:05}@{domain}",
                given.to_lowercase(),
                family.to_lowercase()
            ),
            account: format!(
                "{:04} {:04} {:04}",
                account / 100_000_000,
                account / 10_000 % 10_000,
                account % 10_000
            ),
            note,
            code: {
                let c = self.expand(b"tenantcheck/canary-code/v1\0", owner, case, index);
                let n = u64::from_be_bytes(c[..8].try_into().expect("8 bytes"));
                format!("{}-{:08}", pick(ADJECTIVES, n).to_uppercase(), (n >> 6) % 100_000_000)
            },
        }
    }

    /// The marks of `owner`'s prose: [`MARKS_PER_TENANT`] invented names, each of three
    /// syllables, drawn from the run secret.
    pub fn marks(&self, owner: &str) -> Marks {
        let mut words = Vec::with_capacity(MARKS_PER_TENANT);
        let mut index = 0;
        while words.len() < MARKS_PER_TENANT {
            let d = self.expand(b"tenantcheck/marks/v1\0", owner, "", index);
            index += 1;
            let mut word = String::new();
            for &b in &d[..3] {
                word.push_str(SYLLABLES[usize::from(b) % SYLLABLES.len()]);
            }
            let mut chars = word.chars();
            let word: String = chars
                .next()
                .map(|c| c.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
                .collect();
            if !words.contains(&word) {
                words.push(word);
            }
        }
        Marks {
            owner: owner.to_owned(),
            words,
        }
    }
}

/// How many invented names mark one tenant's prose.
pub const MARKS_PER_TENANT: usize = 24;

/// Whether `word` (lower case) is one a mark could be: three of `SYLLABLES` in a
/// row. Other words are never a tenant's mark, whatever its draw.
pub fn mark_shaped(word: &str) -> bool {
    fn split(rest: &str, left: usize) -> bool {
        if left == 0 {
            return rest.is_empty();
        }
        SYLLABLES
            .iter()
            .any(|s| rest.strip_prefix(s).is_some_and(|r| split(r, left - 1)))
    }
    split(word, 3)
}

/// How many words a mark is drawn from: three of `SYLLABLES`' 32.
pub const MARK_WORDS: usize = 32_768;

/// The syllables marks are made of: 32, so a mark is one of 32,768 words.
const SYLLABLES: &[&str] = &[
    "ka", "lo", "ve", "mi", "tor", "quin", "bra", "del", "fen", "gar", "hol", "jus", "kir", "lum", "mar", "nev", "osk",
    "pel", "rin", "sa", "tu", "vor", "wen", "yl", "zan", "cor", "dra", "eth", "fi", "gro", "hal", "ix",
];

/// The invented names that mark one tenant's prose (see [`RunSecret::marks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks {
    /// The tenant.
    pub owner: String,
    /// Its names, capitalised (`Quindelmar`).
    pub words: Vec<String>,
}

/// The form a canary takes in a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Form {
    /// The whole customer record.
    Record,
    /// The code alone, on a line of its own.
    Code,
}

impl Form {
    /// Every form, in the order a tie is broken.
    pub const ALL: [Form; 2] = [Form::Record, Form::Code];

    /// The word for one item of this form, in instructions ("the first record").
    pub fn noun(self) -> &'static str {
        match self {
            Form::Record => "record",
            Form::Code => "code",
        }
    }
}

impl RunSecret {
    /// The needle number `index` of tenant `owner` in case `case`: a fact to recall.
    pub fn needle(&self, owner: &str, case: &str, index: u32) -> Needle {
        let d = self.expand(b"tenantcheck/needle/v1\0", owner, case, index);
        let word = |i: usize| u64::from_be_bytes(d[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let pick = |list: &'static [&'static str], bits: u64| list[(bits as usize) % list.len()];
        Needle {
            key: format!("{}-{:04}", pick(GOODS, word(0)).trim_end_matches('s'), word(1) % 10_000),
            value: format!("{}-{:04}", pick(ADJECTIVES, word(2)), word(3) % 10_000),
        }
    }

    /// A seed for the filler of prompt number `index` of `owner` in `case`.
    pub fn seed(&self, owner: &str, case: &str, index: u32) -> u64 {
        let d = self.expand(b"tenantcheck/filler/v1\0", owner, case, index);
        u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
    }

    /// The filler of prompt number `index` of `owner` in `case`: its seed, marked with
    /// the owner's names.
    pub fn filler(&self, owner: &str, case: &str, index: u32) -> crate::prompt::Filler {
        crate::prompt::Filler {
            seed: self.seed(owner, case, index),
            marks: self.marks(owner).words,
        }
    }

    /// One of `options`, drawn for this run by `label`: the instructions in prompts
    /// vary from run to run, so that no fixed sentence marks tenantcheck's traffic.
    pub fn pick<'a>(&self, label: &str, options: &[&'a str]) -> &'a str {
        let d = self.expand(b"tenantcheck/phrase/v1\0", label, "", 0);
        let n = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
        options[(n % options.len() as u64) as usize]
    }

    /// The text of `wording` drawn for `label` and `index` (the suite draws each
    /// instruction once per run, at index 0; [`crate::wording`]).
    pub fn say(&self, label: &str, index: u32, wording: crate::wording::Wording) -> String {
        let d = self.expand(b"tenantcheck/wording/v1\0", label, "", index);
        wording.render(crate::wording::stream(u64::from_be_bytes(
            d[..8].try_into().expect("8 bytes"),
        )))
    }

    fn expand(&self, domain: &[u8], owner: &str, case: &str, index: u32) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(domain);
        h.update(self.0);
        for part in [owner.as_bytes(), b"\0", case.as_bytes(), b"\0"] {
            h.update(part);
        }
        h.update(index.to_be_bytes());
        h.finalize().into()
    }
}

/// A fact placed in a prompt to be recalled: "The value of KEY is VALUE."
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needle {
    /// A key such as `parcel-4821`.
    pub key: String,
    /// A value such as `amber-0193`.
    pub value: String,
}

impl Needle {
    /// The sentence that states it.
    pub fn statement(&self) -> String {
        format!("The value of {} is {}.", self.key, self.value)
    }

    /// The question that asks for it.
    pub fn question(&self) -> String {
        format!("What is the value of {}?", self.key)
    }

    /// Whether `answer` recalls it: its value, as stated.
    pub fn recalled_in(&self, answer: &str) -> bool {
        answer.to_lowercase().contains(&self.value.to_lowercase())
    }

    /// Whether `answer` shows the fact was read: its value, or the value's number alone
    /// (the part the run secret draws, four digits: a weak model that writes `2415`
    /// for `numbered-2415` has read the fact, and an answer to a prompt whose fact was
    /// dropped holds those four digits by chance about once in ten thousand). What a
    /// prompt at length is judged by; a short baseline must recall the value itself
    /// ([`Needle::recalled_in`]), so that a model is shown able before its losses count.
    pub fn seen_in(&self, answer: &str) -> bool {
        if self.recalled_in(answer) {
            return true;
        }
        let Some((_, number)) = self.value.rsplit_once('-') else {
            return false;
        };
        if number.len() < 4 || !number.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        // The number as a whole number of the answer, not part of a longer one.
        answer.match_indices(number).any(|(at, _)| {
            let before = answer[..at].chars().next_back();
            let after = answer[at + number.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
        })
    }

    /// The facts `text` states, in the order it states them: each "The value of KEY
    /// is VALUE." whose key and value are single words. What a prompt of the context
    /// cases carries, read back from its recorded request.
    pub fn stated_in(text: &str) -> Vec<Needle> {
        const OPENING: &str = "The value of ";
        let word = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
        let mut found = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(OPENING) {
            rest = &rest[at + OPENING.len()..];
            let Some((key, after)) = rest.split_once(" is ") else {
                break;
            };
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            let value = after[..end].strip_suffix('.');
            if let Some(value) = value
                && word(key)
                && word(value)
            {
                found.push(Needle {
                    key: key.to_owned(),
                    value: value.to_owned(),
                });
            }
        }
        found
    }
}

impl fmt::Debug for RunSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunSecret(commitment {})", self.commitment())
    }
}

/// One canary: a customer record owned by one tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canary {
    /// `owner/case/index`, unique within a run.
    pub id: String,
    /// The tenant it was issued to.
    pub owner: String,
    /// "Given Family".
    pub name: String,
    /// An e-mail address.
    pub email: String,
    /// A 12-digit account number in groups of four.
    pub account: String,
    /// A short note.
    pub note: String,
    /// The code form: a word and eight digits, `AMBER-50332459`.
    pub code: String,
    /// What the record is headed with (one of [`RECORD_LABELS`], the same for the
    /// whole run).
    pub label: &'static str,
}

/// The labels a run's records are headed with, one drawn per run.
pub const RECORD_LABELS: &[&str] = &["Customer record:", "Client file:", "Account holder:", "Member details:"];

/// A part of a canary the scanner looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Fragment {
    /// The holder's name beside what survives of the record, rare enough together
    /// ([`crate::holder`]: at most [`crate::holder::MAX_CHANCE`] likely by
    /// coincidence): a record re-set by a template (`PARK, Thea | acct ****2788 |
    /// gmail.com`), a leak the ledger finds in any answer; or beside a number or an
    /// address that no prompt of the run held, by which `isolation.canary-residue`
    /// names whose data the foreign content of a significant rise is
    /// ([`crate::judge::named`]). A name alone, or a common one with little of the
    /// record, is never a leak.
    Name,
    /// A stretch of words of another tenant's request, however cut, cased or spelled,
    /// holding words only that tenant sent ([`crate::provenance`]; no canary: the hit's
    /// id is `owner/text/seq`, the line of the request that sent them).
    Text,
    /// Sentences of another request's text in a row ([`crate::passage`]; no canary:
    /// the hit's id is `owner/passage/seq`, the line of the request that sent them).
    Passage,
    /// Two or more of the invented names that mark a tenant's prose (no canary: the
    /// hit's id is `owner/prose`).
    Prose,
    /// An account number one digit off the canary's (a model that garbles what it
    /// copies), or two digits off with the owner's family name near it.
    AccountNear,
    /// The account number alone.
    Account,
    /// An e-mail address with two neighbouring letters of its local part swapped, or
    /// one letter changed (a model that garbles what it copies).
    EmailNear,
    /// The e-mail address alone.
    Email,
    /// The code (the canary's second form).
    Code,
    /// The whole record.
    Record,
}

impl Canary {
    /// The record as it is placed in prompts.
    pub fn record(&self) -> String {
        format!(
            "{} {}, email {}, account {}, note: {}.",
            self.label, self.name, self.email, self.account, self.note
        )
    }

    /// The canary as it is placed in a prompt of `form`.
    pub fn text(&self, form: Form) -> String {
        match form {
            Form::Record => self.record(),
            Form::Code => format!("Code: {}", self.code),
        }
    }

    /// The text of each fragment the scanner looks for.
    pub fn fragments(&self) -> [(Fragment, String); 4] {
        [
            (Fragment::Record, self.record()),
            (Fragment::Email, self.email.clone()),
            (Fragment::Account, self.account.clone()),
            (Fragment::Code, self.code.clone()),
        ]
    }

    /// Whether `text` carries this canary in some form (its account number or code).
    pub fn carried_by(&self, text: &str) -> bool {
        text.contains(&self.account) || text.contains(&self.code)
    }
}

/// Every stretch of a text shaped like a canary's account number (`dddd dddd dddd`) or
/// code (capital letters, `-`, eight digits), wherever it starts: whether a text
/// carries one of many canaries is then one pass over the text and a lookup per
/// canary, the same answer as [`Canary::carried_by`] for each.
pub struct Carried<'a>(std::collections::HashSet<&'a str>);

impl<'a> Carried<'a> {
    /// The canary-shaped stretches of `text`.
    pub fn of(text: &'a str) -> Self {
        let b = text.as_bytes();
        let digits = |from: usize, n: usize| b.get(from..from + n).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
        let mut set = std::collections::HashSet::new();
        for i in 0..b.len() {
            // An account: three groups of four digits, one space between.
            if digits(i, 4)
                && b.get(i + 4) == Some(&b' ')
                && digits(i + 5, 4)
                && b.get(i + 9) == Some(&b' ')
                && digits(i + 10, 4)
            {
                set.insert(&text[i..i + 14]);
            }
            // A code: every run of capitals (and inner dashes: `BOXED-UP`) that ends
            // at this `-`, then eight digits.
            if b[i] == b'-' && digits(i + 1, 8) {
                let mut start = i;
                while start > 0 && (b[start - 1].is_ascii_uppercase() || b[start - 1] == b'-') {
                    start -= 1;
                    if b[start] != b'-' {
                        set.insert(&text[start..i + 9]);
                    }
                }
            }
        }
        Carried(set)
    }

    /// Whether the text carries `canary` (its account number or its code).
    pub fn holds(&self, canary: &Canary) -> bool {
        self.0.contains(canary.account.as_str()) || self.0.contains(canary.code.as_str())
    }
}

/// How many given names a canary's holder is drawn from.
pub const GIVEN_NAMES: usize = GIVEN.len();

/// How many family names a canary's holder is drawn from.
pub const FAMILY_NAMES: usize = FAMILY.len();

/// How many domains a canary's e-mail address is drawn from.
pub const DOMAIN_COUNT: usize = DOMAINS.len();

/// How many words each of a note's adjective, goods and city is drawn from.
pub const NOTE_WORDS: usize = 64;
const _: () = assert!(ADJECTIVES.len() == NOTE_WORDS && GOODS.len() == NOTE_WORDS && CITIES.len() == NOTE_WORDS);

/// The pools a canary's holder is drawn from: given names, family names, e-mail
/// domains. Names as common as any: the reference vendor's strangers of
/// `--common-name-strangers` are drawn from them too.
pub fn pools() -> (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
) {
    (GIVEN, FAMILY, DOMAINS)
}

/// How many of the given names start with `initial` (a letter, any case).
pub fn given_with_initial(initial: &str) -> usize {
    GIVEN
        .iter()
        .filter(|g| g.to_lowercase().starts_with(&initial.to_lowercase()))
        .count()
}

const GIVEN: &[&str] = &[
    "Maria", "James", "Aiko", "Lukas", "Priya", "Omar", "Sofia", "Mateo", "Elena", "Noah", "Chloe", "Ravi", "Hannah",
    "Diego", "Yara", "Felix", "Amara", "Jonas", "Leila", "Marco", "Ingrid", "Tomas", "Zara", "Henrik", "Nadia",
    "Pavel", "Grace", "Kenji", "Lucia", "Samir", "Freya", "Andre", "Mei", "Oscar", "Tara", "Bruno", "Alina", "Dmitri",
    "Esther", "Hugo", "Isla", "Karim", "Lena", "Milo", "Nora", "Pablo", "Rosa", "Stefan", "Thea", "Victor", "Wanda",
    "Xavier", "Yusuf", "Zoe", "Anton", "Bianca", "Carlos", "Dalia", "Emil", "Fatima", "Gustav", "Helena", "Ivan",
    "Julia",
];

const FAMILY: &[&str] = &[
    "Keller",
    "Okafor",
    "Tanaka",
    "Novak",
    "Sharma",
    "Haddad",
    "Rossi",
    "Garcia",
    "Petrov",
    "Lindqvist",
    "Dubois",
    "Mensah",
    "Kowalski",
    "Silva",
    "Nakamura",
    "Fischer",
    "Moreau",
    "Adeyemi",
    "Jansen",
    "Costa",
    "Horvat",
    "Ivanova",
    "Larsen",
    "Mendes",
    "Nilsson",
    "Oliveira",
    "Popescu",
    "Quinn",
    "Romano",
    "Schmidt",
    "Tremblay",
    "Uddin",
    "Varga",
    "Weber",
    "Yilmaz",
    "Zhang",
    "Abbott",
    "Brennan",
    "Castillo",
    "Delgado",
    "Eriksen",
    "Ferreira",
    "Gallagher",
    "Hoffmann",
    "Ibrahim",
    "Jovanovic",
    "Kaur",
    "Lambert",
    "Meyer",
    "Nowak",
    "Ortiz",
    "Park",
    "Reyes",
    "Santos",
    "Thorsen",
    "Ueda",
    "Vogel",
    "Walsh",
    "Xu",
    "Young",
    "Ziegler",
    "Bauer",
    "Chen",
    "Duarte",
];

const DOMAINS: &[&str] = &[
    "posteo.de",
    "gmx.net",
    "proton.me",
    "fastmail.com",
    "outlook.com",
    "mailbox.org",
    "web.de",
    "icloud.com",
    "yahoo.co.uk",
    "zoho.com",
    "hey.com",
    "tutanota.com",
    "gmail.com",
    "orange.fr",
    "libero.it",
    "aol.com",
];

const ADJECTIVES: &[&str] = &[
    "amber",
    "quiet",
    "early",
    "sealed",
    "fragile",
    "heavy",
    "small",
    "weekly",
    "insured",
    "paper",
    "green",
    "cold",
    "bulk",
    "gift",
    "spare",
    "signed",
    "plain",
    "urgent",
    "boxed",
    "recycled",
    "local",
    "monthly",
    "wrapped",
    "large",
    "light",
    "blue",
    "red",
    "unmarked",
    "labelled",
    "padded",
    "daily",
    "priority",
    "morning",
    "evening",
    "sturdy",
    "narrow",
    "wide",
    "tall",
    "flat",
    "round",
    "silver",
    "golden",
    "wooden",
    "glass",
    "metal",
    "woollen",
    "cotton",
    "linen",
    "frozen",
    "dry",
    "fresh",
    "organic",
    "seasonal",
    "returned",
    "replacement",
    "sample",
    "trial",
    "annual",
    "boxed-up",
    "stacked",
    "loose",
    "bundled",
    "tagged",
    "numbered",
];

const GOODS: &[&str] = &[
    "parcels",
    "letters",
    "invoices",
    "groceries",
    "books",
    "tools",
    "flowers",
    "medicines",
    "documents",
    "samples",
    "prints",
    "records",
    "tiles",
    "lamps",
    "chairs",
    "fabrics",
    "spices",
    "teas",
    "coffees",
    "batteries",
    "cables",
    "filters",
    "seeds",
    "paints",
    "brushes",
    "maps",
    "tickets",
    "keys",
    "badges",
    "uniforms",
    "shoes",
    "hats",
    "gloves",
    "scarves",
    "blankets",
    "towels",
    "plates",
    "cups",
    "bottles",
    "jars",
    "boxes",
    "crates",
    "pallets",
    "envelopes",
    "folders",
    "binders",
    "notebooks",
    "pens",
    "stamps",
    "cards",
    "posters",
    "frames",
    "mirrors",
    "clocks",
    "radios",
    "phones",
    "laptops",
    "monitors",
    "printers",
    "scanners",
    "speakers",
    "cameras",
    "lenses",
    "tripods",
];

const CITIES: &[&str] = &[
    "Lisbon",
    "Osaka",
    "Toronto",
    "Nairobi",
    "Krakow",
    "Valencia",
    "Bergen",
    "Porto",
    "Leeds",
    "Lyon",
    "Graz",
    "Turin",
    "Accra",
    "Pune",
    "Austin",
    "Denver",
    "Quito",
    "Tartu",
    "Ghent",
    "Malmo",
    "Bilbao",
    "Cork",
    "Brno",
    "Split",
    "Aarhus",
    "Basel",
    "Bremen",
    "Cardiff",
    "Dresden",
    "Eindhoven",
    "Florence",
    "Gdansk",
    "Haifa",
    "Izmir",
    "Kyoto",
    "Lagos",
    "Leipzig",
    "Lille",
    "Lucerne",
    "Madras",
    "Nantes",
    "Oslo",
    "Perth",
    "Riga",
    "Rotterdam",
    "Salzburg",
    "Seville",
    "Tampere",
    "Utrecht",
    "Vilnius",
    "Windsor",
    "York",
    "Zagreb",
    "Adelaide",
    "Bologna",
    "Calgary",
    "Dijon",
    "Exeter",
    "Fukuoka",
    "Geneva",
    "Hobart",
    "Innsbruck",
    "Jena",
    "Kaunas",
];

#[cfg(test)]
mod tests {

    #[test]
    fn the_facts_a_prompt_states_are_read_back_in_order_and_questions_are_not_facts() {
        let secret = RunSecret::derive(&[3; 32], b"");
        let (a, b) = (secret.needle("a", "c", 1), secret.needle("a", "c", 2));
        let prompt = format!(
            "Read the notes.\n\n{} Some prose, the value of nothing is here. {}\nMore prose.\n\nAnswer each question. {} {}",
            a.statement(),
            b.statement(),
            a.question(),
            b.question()
        );
        assert_eq!(Needle::stated_in(&prompt), vec![a, b]);
        assert!(Needle::stated_in("The value of two words is x.").is_empty());
    }

    #[test]
    fn a_fact_is_recalled_by_its_value_and_seen_by_the_number_the_secret_drew_for_it() {
        let n = Needle {
            key: "card-2241".into(),
            value: "numbered-2415".into(),
        };
        assert!(n.recalled_in("It is NUMBERED-2415.") && n.seen_in("It is NUMBERED-2415."));
        // A weak model that drops the word keeps the number: it read the fact, but
        // did not recall it as stated.
        assert!(n.seen_in("The value of card-2241 is 2415."));
        assert!(!n.recalled_in("The value of card-2241 is 2415."));
        // The key's number, a longer number, or the value cut short are not it.
        for answer in [
            "What is the value of card-2241?",
            "The total is 124150.",
            "1. The value of card-2241 is numbered-24",
            "The value of card-2241 is 919",
        ] {
            assert!(!n.seen_in(answer) && !n.recalled_in(answer), "{answer}");
        }
    }

    #[test]
    fn phrases_vary_from_run_to_run_and_stay_fixed_within_one() {
        let options = ["one", "two", "three"];
        let mut seen = std::collections::BTreeSet::new();
        for n in 0..64u8 {
            let secret = RunSecret::derive(&[n; 32], b"");
            let first = secret.pick("label", &options);
            assert_eq!(secret.pick("label", &options), first);
            seen.insert(first);
        }
        assert_eq!(seen.len(), 3, "every phrase is drawn by some run");
    }

    use super::*;

    #[test]
    fn carried_agrees_with_carried_by() {
        let s = RunSecret::generate();
        // 400 canaries: codes of every adjective, `BOXED-UP` with its dash among them
        // (all but surely).
        let cs: Vec<Canary> = (0..400).map(|i| s.canary("a", "t", i)).collect();
        let mut text = String::from("x1");
        for (i, c) in cs.iter().enumerate() {
            match i % 4 {
                0 => text.push_str(&format!(" {} ", c.record())),
                1 => text.push_str(&format!("9{}7", c.account)),
                2 => text.push_str(&format!("Q{}5", c.code)),
                _ => {}
            }
        }
        let carried = Carried::of(&text);
        for c in &cs {
            assert_eq!(carried.holds(c), c.carried_by(&text), "{}", c.id);
        }
        assert!(cs.iter().filter(|c| carried.holds(c)).count() >= 300);
    }

    #[test]
    fn lists_have_the_sizes_the_entropy_count_assumes() {
        for list in [GIVEN, FAMILY, ADJECTIVES, GOODS, CITIES] {
            assert_eq!(list.len(), 64);
        }
        assert_eq!(DOMAINS.len(), 16);
    }

    #[test]
    fn canaries_are_derived_deterministically_and_differ() {
        let s = RunSecret::generate();
        assert_eq!(s.canary("a", "c", 1), s.canary("a", "c", 1));
        assert_ne!(s.canary("a", "c", 1).account, s.canary("b", "c", 1).account);
        assert_ne!(s.canary("a", "c", 1).email, s.canary("a", "c", 2).email);
        let other = RunSecret::generate();
        assert_ne!(s.canary("a", "c", 1).record(), other.canary("a", "c", 1).record());
    }

    #[test]
    fn secrets_round_trip_through_hex() {
        let s = RunSecret::generate();
        assert_eq!(RunSecret::from_hex(&s.to_hex()), Some(s.clone()));
        assert!(RunSecret::from_hex("zz").is_none());
        assert!(!format!("{s:?}").contains(&s.to_hex()));
    }

    #[test]
    fn a_canary_looks_like_a_customer_record() {
        let c = RunSecret::generate().canary("a", "case", 0);
        let r = c.record();
        assert!(RECORD_LABELS.iter().any(|l| r.starts_with(&format!("{l} "))), "{r}");
        assert!(!r.to_lowercase().contains("canary"));
        assert_eq!(c.account.len(), 14);
        assert!(c.email.contains('@'));
        let (word, digits) = c.code.rsplit_once('-').unwrap();
        assert!(ADJECTIVES.contains(&word.to_lowercase().as_str()), "{}", c.code);
        assert_eq!(digits.len(), 8);
        assert!(c.text(Form::Code).contains(&c.code) && c.carried_by(&c.text(Form::Code)));
    }

    #[test]
    fn marks_are_invented_names_of_one_tenant() {
        let s = RunSecret::generate();
        let (a, b) = (s.marks("a"), s.marks("b"));
        assert_eq!(a, s.marks("a"));
        assert_eq!(a.words.len(), MARKS_PER_TENANT);
        assert_ne!(a.words, b.words);
        assert_eq!(SYLLABLES.len(), 32);
        assert_eq!(SYLLABLES.len().pow(3), MARK_WORDS);
        for w in a.words.iter().chain(&b.words) {
            assert!(mark_shaped(&w.to_lowercase()), "{w}");
        }
        for w in ["maria", "the", "kalo", "kalovemi", "velkaro"] {
            assert!(!mark_shaped(w), "{w}");
        }
        assert!(mark_shaped("quindelmar") && mark_shaped("kaloix"));
        for w in &a.words {
            assert!(w.len() >= 5 && w.chars().next().unwrap().is_ascii_uppercase(), "{w}");
        }
    }
}
