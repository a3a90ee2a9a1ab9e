//! Every reference the code makes into the docs (`docs/<name>.md#<anchor>` in a comment, a message
//! or a test) names a file and a heading that exist, so a reader who follows one lands where
//! it points (docs/architecture.md: the design lives in the repository).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_docs_reference_in_the_code_names_a_heading_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut anchors: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "md") {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let headings = text
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .collect();
            anchors.insert(name, headings);
        }
    }
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let reference = regex::Regex::new(r"docs/([a-zA-Z_]+\.md)(?:#([a-z0-9_-]+))?").unwrap();
    let (mut seen, mut broken) = (0, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for m in reference.captures_iter(line) {
                seen += 1;
                let (doc, heading) = (&m[1], m.get(2).map(|h| h.as_str()));
                let ok = match (anchors.get(doc), heading) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(headings), Some(h)) => headings.contains(h),
                };
                if !ok {
                    broken.push(format!("{}:{}: {}", file.display(), n + 1, &m[0]));
                }
            }
        }
    }
    assert!(
        seen > 40,
        "only {seen} references found: is the pattern still right?"
    );
    assert!(
        broken.is_empty(),
        "references to nothing:\n{}",
        broken.join("\n")
    );
}
