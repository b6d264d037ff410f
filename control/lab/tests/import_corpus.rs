//! Every containerlab and KNE file of `examples/clab/` imported, and the lab compared field by
//! field with the one that file means (`NAME.lab.yaml`), or refused for the reason its
//! first line names (see examples/clab/README.md).

use std::path::{Path, PathBuf};

use xwire_lab::file::parse;
use xwire_lab::import::import;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/clab")
}

#[test]
fn every_file_of_the_corpus_imports_as_it_means_or_is_refused_for_its_reason() {
    let dir = std::fs::canonicalize(corpus()).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".clab.yml") || name.ends_with(".pb.txt")
        })
        .collect();
    files.sort();
    let (mut imported, mut refused) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let result = import(&text, file, 2, None);
        if let Some(reason) = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# refused: "))
        {
            let e = match result {
                Ok(lab) => panic!("{name}: imported, not refused:\n{}", lab.lab),
                Err(e) => format!("{e:#}"),
            };
            assert!(e.contains(reason), "{name}: {e}");
            refused += 1;
            continue;
        }
        let got = result.unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let got = parse(&got.lab, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        let stem = name
            .trim_end_matches(".clab.yml")
            .trim_end_matches(".pb.txt");
        let expected_file = dir.join(format!("{stem}.lab.yaml"));
        let expected = std::fs::read_to_string(&expected_file)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_file.display()))
            .replace("{dir}", &dir.display().to_string());
        let expected = parse(&expected, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.name, expected.name, "{name}: name");
        assert_eq!(got.nodes, expected.nodes, "{name}: nodes");
        assert_eq!(got.pods, expected.pods, "{name}: pods' nodes");
        assert_eq!(got.containers.len(), expected.containers.len(), "{name}");
        for (pod, container) in &expected.containers {
            assert_eq!(
                got.containers.get(pod),
                Some(container),
                "{name}: pod {pod}"
            );
        }
        assert_eq!(got.links, expected.links, "{name}: links");
        assert_eq!(got, expected, "{name}: the rest");
        imported += 1;
    }
    assert_eq!((imported, refused), (4, 5), "{files:?}");
}
