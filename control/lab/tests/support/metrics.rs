//! Scraping a daemon's metrics endpoint the way Prometheus does: an HTTP GET, then the
//! text format read line by line.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One sample: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// GETs `url` (`http://host:port/path`) and parses the body; panics on anything that is
/// not a 200 answer in the text format.
pub fn scrape(url: &str) -> Vec<Sample> {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = TcpStream::connect(host).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    parse(body)
}

/// The samples of a text exposition; every line must be a comment or a sample.
pub fn parse(body: &str) -> Vec<Sample> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, labels)) => {
                    let labels = labels.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
                    let pairs = labels
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) =
                                pair.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                            (key.to_owned(), value.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), pairs)
                }
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// The value of the one sample named `name` whose labels include `labels`.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "several samples match {name} {labels:?}: {matching:?}"
    );
    matching.first().map(|s| s.value)
}
