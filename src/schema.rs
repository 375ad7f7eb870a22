//! [`Schema`]: the JSON Schemas (draft 2020-12) of the files tenantcheck reads and
//! writes, generated from the Rust types that read and write them.
//!
//! `tenantcheck schema KIND` prints one; the generated files live in `reports/schema/`
//! for editors and validators, and a test fails when they are stale. Loading a profile
//! or a case goes through the very types the schemas come from (with unknown fields
//! refused), so a file the loader accepts is one the schema accepts; the loader's
//! errors name the file, the line and the field.

use crate::suite::{Advisory, Severity, Threat};
use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Value, json};

/// A kind of file with a schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Schema {
    /// The report: the predicate of the signed statement.
    Report,
    /// A merge summary (`tenantcheck merge`): the predicate of its signed statement.
    Summary,
    /// A buyer's policy (`verify --policy`).
    Policy,
    /// A vendor profile (`vendors/*.toml`).
    Vendor,
    /// A suite case (`suite/**/*.toml`).
    Case,
    /// An advisory (`suite/advisories/*.toml`).
    Advisory,
    /// A line of the external-command adapter's protocol, either way.
    Command,
    /// A buyer's challenge file (`tenantcheck challenge`).
    Challenge,
    /// A run's end entry in the transparency log (`log-end.json` beside its report).
    LogEnd,
}

impl Schema {
    /// Every kind.
    pub const ALL: &[Schema] = &[
        Schema::Report,
        Schema::Summary,
        Schema::Policy,
        Schema::Vendor,
        Schema::Case,
        Schema::Advisory,
        Schema::Command,
        Schema::Challenge,
        Schema::LogEnd,
    ];

    /// The kind's name, as on the command line and in `reports/schema/NAME.schema.json`.
    pub fn name(self) -> &'static str {
        match self {
            Schema::Report => "report",
            Schema::Summary => "summary",
            Schema::Policy => "policy",
            Schema::Vendor => "vendor",
            Schema::Case => "case",
            Schema::Advisory => "advisory",
            Schema::Command => "command",
            Schema::Challenge => "challenge",
            Schema::LogEnd => "log-end",
        }
    }

    /// The schema.
    pub fn generate(self) -> Value {
        let mut schema = match self {
            Schema::Report => written::<crate::report::Report>(),
            Schema::Summary => written::<crate::shard::Summary>(),
            Schema::Policy => of::<crate::policy::Policy>(),
            Schema::Vendor => of::<crate::vendor::VendorProfile>(),
            Schema::Advisory => of::<Advisory>(),
            Schema::Case => case(),
            Schema::Command => of::<CommandLine>(),
            Schema::Challenge => written::<crate::tlog::Challenge>(),
            Schema::LogEnd => written::<crate::tlog::EndRecord>(),
        };
        schema["$id"] = json!(format!("urn:tenantcheck:schema:{}:v1", self.name()));
        schema
    }

    /// The schema as the pretty JSON of `reports/schema/`, with a final newline.
    pub fn to_file_text(self) -> String {
        let mut text = serde_json::to_string_pretty(&self.generate()).expect("schemas serialise");
        text.push('\n');
        text
    }
}

/// The schema of a file tenantcheck reads: fields with defaults are optional.
fn of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12().for_deserialize().into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// The schema of a file tenantcheck writes: what it writes is always there.
fn written<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12().for_serialize().into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// One line of the external-command protocol: a request the suite writes, or a reply
/// the program writes.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum CommandLine {
    /// Written by the suite to the program's standard input.
    Request(crate::adapter::CommandRequest),
    /// Written by the program to its standard output.
    Reply(crate::adapter::CommandReply),
}

/// The header every case shares.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct CaseHeader {
    /// `area.behaviour`: the file's path below `suite/` with `/` as `.`, without `.toml`.
    id: String,
    /// What the case does.
    description: String,
    /// The requirement, as one sentence with MUST or MUST NOT.
    requirement: String,
    /// The threat it covers (T1–T12).
    threat: Threat,
    /// How bad a failure is.
    severity: Severity,
    /// Where the requirement comes from.
    #[serde(default)]
    references: Vec<String>,
}

/// The case schema: the header, and for each probe its own `params`.
fn case() -> Value {
    let mut schema = of::<CaseHeader>();
    let probes: Vec<(&str, Value)> = crate::probe::REGISTRY
        .iter()
        .map(|k| (k.name, k.params_schema()))
        .collect();
    schema["properties"]["probe"] = json!({
        "description": "The probe that runs the case.",
        "enum": probes.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
    });
    schema["properties"]["params"] = json!({ "description": "The probe's parameters; see oneOf.", "type": "object" });
    schema["required"]
        .as_array_mut()
        .expect("a struct has required fields")
        .push(json!("probe"));
    schema["additionalProperties"] = json!(false);
    let mut defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    schema["oneOf"] = probes
        .into_iter()
        .map(|(kind, mut params)| {
            if let Some(map) = params.as_object_mut() {
                map.remove("$schema");
                map.remove("title");
                // A probe's own definitions (`#/$defs/...`) resolve against the root.
                if let Some(Value::Object(own)) = map.remove("$defs") {
                    for (name, def) in own {
                        if let Some(other) = defs.get(&name) {
                            assert_eq!(other, &def, "bug in tenantcheck: two schemas define {name} differently");
                        }
                        defs.insert(name, def);
                    }
                }
            }
            json!({ "properties": { "probe": { "const": kind }, "params": params } })
        })
        .collect();
    schema["$defs"] = Value::Object(defs);
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_names_its_fields() {
        let report = Schema::Report.generate();
        assert!(report["properties"]["run_secret"].is_object());
        let vendor = Schema::Vendor.generate();
        assert_eq!(vendor["additionalProperties"], json!(false));
        assert!(vendor["properties"]["tenants"].is_object());
        let case = Schema::Case.generate();
        assert_eq!(case["oneOf"].as_array().unwrap().len(), crate::probe::REGISTRY.len());
        assert!(case["required"].as_array().unwrap().contains(&json!("probe")));
        assert!(Schema::Advisory.generate()["properties"]["affected"].is_object());
    }
}
