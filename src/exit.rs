//! Exit codes of the `tenantcheck` binary, in one place.
//!
//! `tenantcheck run`:
//!
//! | code | constant | meaning |
//! | --- | --- | --- |
//! | 0 | [`SUCCESS`] | every selected case passed |
//! | 1 | [`FAILED`] | at least one case failed |
//! | 2 | [`SETUP_ERROR`] | usage, profile, suite or harness error, or a key the vendor refused (401, 403) after the credential check passed: nothing (more) was judged; the report of the cases before is signed |
//! | 3 | [`INCONCLUSIVE`] | none failed, but at least one was inconclusive |
//! | 130 | [`INTERRUPTED`] | interrupted (SIGINT, SIGTERM) before every case finished, none failed: the report is marked incomplete; `run --resume DIR` continues it |
//!
//! `tenantcheck verify` exits [`SUCCESS`] when every check holds, [`FAILED`] when one
//! does not, [`POLICY_UNMET`] when the report verifies but a requirement of the policy
//! given with `--policy` is unmet, and [`SETUP_ERROR`] when its inputs (the policy
//! included) cannot be read. `tenantcheck diff`
//! exits [`SUCCESS`] when no case regressed, [`FAILED`] when one did or a report does
//! not verify, and [`SETUP_ERROR`] when its inputs cannot be read. `tenantcheck merge`
//! exits with the merged verdict as `run` does ([`SUCCESS`], [`FAILED`],
//! [`INCONCLUSIVE`]), [`FAILED`] also when a report does not verify or the reports do
//! not make whole runs (nothing is merged), and [`SETUP_ERROR`] when its inputs cannot be
//! read. The other commands exit [`SUCCESS`] or [`SETUP_ERROR`].

/// Every selected case passed (or, for `verify`, every check held).
pub const SUCCESS: u8 = 0;
/// At least one case failed (or, for `verify`, a check did not hold).
pub const FAILED: u8 = 1;
/// Usage, profile, suite or harness error, or a key the vendor refused after the
/// credential check: the run could not judge the vendor.
pub const SETUP_ERROR: u8 = 2;
/// `verify --policy`: the report verifies, but at least one requirement of the buyer's
/// policy is unmet.
pub const POLICY_UNMET: u8 = 4;
/// No case failed, but at least one could not reach its condition.
pub const INCONCLUSIVE: u8 = 3;
/// The run was interrupted (SIGINT or SIGTERM) before every case finished and none
/// failed; its report is marked incomplete (128 + SIGINT's number, as shells report an
/// interrupted command).
pub const INTERRUPTED: u8 = 130;
