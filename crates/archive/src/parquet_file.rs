//! The Parquet files: their schema, writing a batch of rows into one, and reading rows back
//! (all of them, or only an event's, fetching no more of the file than the footer, one bloom
//! filter per candidate row group and the row groups that may hold it).
//!
//! Each file's rows are sorted by `event_id` (then `received_at`), in row groups of
//! [`ROW_GROUP`] rows, so a row group's `event_id` statistics are a narrow range and a lookup
//! reads one row group per file at most; each row group also carries a bloom filter on
//! `event_id`, which query engines use as well. Compression: zstd.

use std::io::Read;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use parquet::basic::{Compression, ZstdLevel};
use parquet::bloom_filter::Sbbf;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{ChunkReader, FileReader, Length, SerializedFileReader};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::record::Field;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

use crate::row::ArchivedRow;
use idemgate_core::Timestamp;

/// The schema every archive file has, column for column.
pub const SCHEMA: &str = "
message idemgate_history {
    REQUIRED BYTE_ARRAY source (STRING);
    REQUIRED BYTE_ARRAY event_id (STRING);
    REQUIRED BYTE_ARRAY outcome (STRING);
    REQUIRED BOOLEAN processed;
    OPTIONAL INT32 attempt;
    REQUIRED INT64 received_at (TIMESTAMP(MILLIS,true));
    OPTIONAL INT64 gap_ms;
    OPTIONAL BYTE_ARRAY fingerprint;
    OPTIONAL BYTE_ARRAY note (STRING);
}
";

/// The column names, in order.
pub const COLUMNS: [&str; 9] = [
    "source",
    "event_id",
    "outcome",
    "processed",
    "attempt",
    "received_at",
    "gap_ms",
    "fingerprint",
    "note",
];
const EVENT_ID: usize = 1;

/// Rows per row group.
pub const ROW_GROUP: usize = 32_768;

/// How much of a file's end a lookup fetches first, hoping the footer fits.
const TAIL: u64 = 64 * 1024;

/// Writes `rows` (sorted here by event id, then time) into one Parquet file.
///
/// # Errors
/// The parquet writer's, in words.
pub fn encode(rows: &mut [ArchivedRow]) -> Result<Bytes, String> {
    rows.sort_by(|a, b| {
        (a.event_id.as_str(), a.received_at).cmp(&(b.event_id.as_str(), b.received_at))
    });
    let schema = Arc::new(parse_message_type(SCHEMA).map_err(|e| e.to_string())?);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).map_err(|e| e.to_string())?,
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_column_bloom_filter_enabled(ColumnPath::from("event_id"), true)
        .set_column_bloom_filter_fpp(ColumnPath::from("event_id"), 0.01)
        .set_column_bloom_filter_max_ndv(ColumnPath::from("event_id"), ROW_GROUP as u64)
        .set_created_by("idemgate".to_owned())
        .build();
    let mut writer = SerializedFileWriter::new(Vec::new(), schema, Arc::new(props))
        .map_err(|e| e.to_string())?;
    for chunk in rows.chunks(ROW_GROUP) {
        let mut group = writer.next_row_group().map_err(|e| e.to_string())?;
        write_group(&mut group, chunk).map_err(|e| e.to_string())?;
        group.close().map_err(|e| e.to_string())?;
    }
    let out = writer.into_inner().map_err(|e| e.to_string())?;
    Ok(Bytes::from(out))
}

fn write_group(
    group: &mut SerializedRowGroupWriter<'_, Vec<u8>>,
    rows: &[ArchivedRow],
) -> parquet::errors::Result<()> {
    fn text(s: &str) -> ByteArray {
        ByteArray::from(s.as_bytes().to_vec())
    }
    // Each column in schema order: its present values and, if optional, definition levels.
    let required =
        |f: &dyn Fn(&ArchivedRow) -> ByteArray| -> Vec<ByteArray> { rows.iter().map(f).collect() };
    let sources = required(&|r| text(&r.source));
    let events = required(&|r| text(&r.event_id));
    let outcomes = required(&|r| text(&r.outcome));
    let processed: Vec<bool> = rows.iter().map(|r| r.processed).collect();
    let (attempts, attempt_levels) = optional(rows, |r| r.attempt);
    let received: Vec<i64> = rows.iter().map(|r| r.received_at.as_millis()).collect();
    let (gaps, gap_levels) = optional(rows, |r| r.gap_ms);
    let (prints, print_levels) = optional(rows, |r| {
        r.fingerprint.as_ref().map(|f| ByteArray::from(f.clone()))
    });
    let (notes, note_levels) = optional(rows, |r| r.note.as_deref().map(text));

    let mut n = 0;
    while let Some(mut column) = group.next_column()? {
        match n {
            0 => column
                .typed::<ByteArrayType>()
                .write_batch(&sources, None, None)?,
            1 => column
                .typed::<ByteArrayType>()
                .write_batch(&events, None, None)?,
            2 => column
                .typed::<ByteArrayType>()
                .write_batch(&outcomes, None, None)?,
            3 => column
                .typed::<BoolType>()
                .write_batch(&processed, None, None)?,
            4 => column
                .typed::<Int32Type>()
                .write_batch(&attempts, Some(&attempt_levels), None)?,
            5 => column
                .typed::<Int64Type>()
                .write_batch(&received, None, None)?,
            6 => column
                .typed::<Int64Type>()
                .write_batch(&gaps, Some(&gap_levels), None)?,
            7 => column
                .typed::<ByteArrayType>()
                .write_batch(&prints, Some(&print_levels), None)?,
            _ => column
                .typed::<ByteArrayType>()
                .write_batch(&notes, Some(&note_levels), None)?,
        };
        column.close()?;
        n += 1;
    }
    Ok(())
}

/// The present values of an optional column and its definition levels (1 present, 0 null).
fn optional<T>(rows: &[ArchivedRow], f: impl Fn(&ArchivedRow) -> Option<T>) -> (Vec<T>, Vec<i16>) {
    let mut values = Vec::new();
    let mut levels = Vec::with_capacity(rows.len());
    for r in rows {
        match f(r) {
            Some(v) => {
                values.push(v);
                levels.push(1);
            }
            None => levels.push(0),
        }
    }
    (values, levels)
}

/// Checks that a file's schema is the archive's: the same columns, in order, of the same types.
///
/// # Errors
/// What differs.
pub fn check_schema(meta: &ParquetMetaData) -> Result<(), String> {
    let ours = parse_message_type(SCHEMA).map_err(|e| e.to_string())?;
    let ours = parquet::schema::types::SchemaDescriptor::new(Arc::new(ours));
    let theirs = meta.file_metadata().schema_descr();
    let names = |d: &parquet::schema::types::SchemaDescriptor| -> Vec<String> {
        d.columns()
            .iter()
            .map(|c| format!("{} {}", c.name(), c.physical_type()))
            .collect()
    };
    let (want, got) = (names(&ours), names(theirs));
    if want != got {
        return Err(format!(
            "not an idemgate history file: its columns are [{}], an archive file's are [{}]",
            got.join(", "),
            want.join(", ")
        ));
    }
    Ok(())
}

/// Every row of a whole file.
///
/// # Errors
/// A file that is not Parquet, or not of the archive's schema.
pub fn decode_all(bytes: Bytes) -> Result<Vec<ArchivedRow>, String> {
    let reader =
        SerializedFileReader::new(bytes).map_err(|e| format!("not a Parquet file: {e}"))?;
    check_schema(reader.metadata())?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None).map_err(|e| e.to_string())? {
        out.push(to_row(&row.map_err(|e| e.to_string())?)?);
    }
    Ok(out)
}

fn to_row(row: &parquet::record::Row) -> Result<ArchivedRow, String> {
    let mut fields = row.get_column_iter().map(|(_, f)| f);
    let mut next = || {
        fields
            .next()
            .ok_or_else(|| "a row lacks a column".to_owned())
    };
    let text = |f: &Field| match f {
        Field::Str(s) => Ok(s.clone()),
        other => Err(format!("expected text, found {other}")),
    };
    let opt_text = |f: &Field| match f {
        Field::Null => Ok(None),
        other => text(other).map(Some),
    };
    Ok(ArchivedRow {
        source: text(next()?)?,
        event_id: text(next()?)?,
        outcome: text(next()?)?,
        processed: match next()? {
            Field::Bool(b) => *b,
            other => return Err(format!("processed: expected a boolean, found {other}")),
        },
        attempt: match next()? {
            Field::Null => None,
            Field::Int(i) => Some(*i),
            other => return Err(format!("attempt: expected an integer, found {other}")),
        },
        received_at: match next()? {
            Field::TimestampMillis(t) | Field::Long(t) => Timestamp::from_millis(*t),
            other => return Err(format!("received_at: expected a timestamp, found {other}")),
        },
        gap_ms: match next()? {
            Field::Null => None,
            Field::Long(g) => Some(*g),
            other => return Err(format!("gap_ms: expected an integer, found {other}")),
        },
        fingerprint: match next()? {
            Field::Null => None,
            Field::Bytes(b) => Some(b.data().to_vec()),
            other => return Err(format!("fingerprint: expected bytes, found {other}")),
        },
        note: opt_text(next()?)?,
    })
}

/// Parts of a file fetched so far, read as the whole file by the Parquet reader: a read outside
/// them is an error (the lookup fetched too little), never a silent short read.
#[derive(Debug, Default)]
pub struct Sparse {
    len: u64,
    parts: Vec<(u64, Bytes)>,
}

impl Sparse {
    pub fn new(len: u64) -> Self {
        Self {
            len,
            parts: Vec::new(),
        }
    }

    pub fn add(&mut self, start: u64, bytes: Bytes) {
        self.parts.push((start, bytes));
    }

    fn find(&self, start: u64, length: usize) -> Option<Bytes> {
        self.parts.iter().find_map(|(at, b)| {
            let end = at + b.len() as u64;
            (start >= *at && start + length as u64 <= end).then(|| {
                let from = (start - at) as usize;
                b.slice(from..from + length)
            })
        })
    }
}

impl Length for Sparse {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Sparse {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let part = self
            .parts
            .iter()
            .filter(|(at, b)| start >= *at && start < at + b.len() as u64)
            .map(|(at, b)| b.slice((start - at) as usize..))
            .next()
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!("byte {start} was not fetched"))
            })?;
        Ok(part.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.find(start, length).ok_or_else(|| {
            parquet::errors::ParquetError::General(format!(
                "bytes {start}..{} were not fetched",
                start + length as u64
            ))
        })
    }
}

/// Where a file's footer (metadata) starts, from its last 8 bytes, and its length.
///
/// # Errors
/// A file that does not end as Parquet files end.
pub fn footer_span(len: u64, last8: &[u8]) -> Result<(u64, u64), String> {
    if len < 12 || last8.len() != 8 || &last8[4..] != b"PAR1" {
        return Err("not a Parquet file (no PAR1 footer)".into());
    }
    let meta = u64::from(u32::from_le_bytes([last8[0], last8[1], last8[2], last8[3]]));
    if meta + 12 > len {
        return Err(format!(
            "its footer claims {meta} bytes of metadata, more than the file holds"
        ));
    }
    Ok((len - 8 - meta, meta + 8))
}

/// How much to fetch first from a file's end.
pub fn tail_len(len: u64) -> u64 {
    len.min(TAIL)
}

/// The metadata out of a fetched tail (which must hold the whole footer).
///
/// # Errors
/// Metadata that does not parse, or is not of the archive's schema.
pub fn metadata(tail: &Bytes) -> Result<ParquetMetaData, String> {
    let n = tail.len();
    if n < 8 {
        return Err("shorter than a Parquet footer".into());
    }
    let meta_len =
        u32::from_le_bytes([tail[n - 8], tail[n - 7], tail[n - 6], tail[n - 5]]) as usize;
    if meta_len + 8 > n {
        return Err("the footer was not fetched whole".into());
    }
    let meta = ParquetMetaDataReader::decode_metadata(&tail[n - 8 - meta_len..n - 8])
        .map_err(|e| format!("its metadata does not parse: {e}"))?;
    check_schema(&meta)?;
    Ok(meta)
}

/// Whether row group `rg`'s `event_id` statistics admit `event_id` (no statistics: maybe).
pub fn may_hold(rg: &RowGroupMetaData, event_id: &str) -> bool {
    match rg.column(EVENT_ID).statistics() {
        Some(Statistics::ByteArray(s)) => {
            let id = event_id.as_bytes();
            let above_min = s.min_opt().is_none_or(|m| m.data() <= id);
            let below_max = s.max_opt().is_none_or(|m| id <= m.data());
            above_min && below_max
        }
        _ => true,
    }
}

/// The byte span of row group `rg`'s bloom filter on `event_id`, if it has one.
pub fn bloom_span(rg: &RowGroupMetaData) -> Option<(u64, u64)> {
    let c = rg.column(EVENT_ID);
    let offset = u64::try_from(c.bloom_filter_offset()?).ok()?;
    let length = u64::try_from(c.bloom_filter_length()?).ok()?;
    Some((offset, length))
}

/// Whether the bloom filter of `rg` (its bytes in `file`) may hold `event_id`.
pub fn bloom_admits(rg: &RowGroupMetaData, file: &Sparse, event_id: &str) -> Result<bool, String> {
    match Sbbf::read_from_column_chunk(rg.column(EVENT_ID), file).map_err(|e| e.to_string())? {
        Some(filter) => Ok(filter.check(&ByteArray::from(event_id))),
        None => Ok(true),
    }
}

/// The byte span of row group `rg`'s column chunks.
pub fn group_span(rg: &RowGroupMetaData) -> (u64, u64) {
    let mut start = u64::MAX;
    let mut end = 0;
    for c in rg.columns() {
        let (s, l) = c.byte_range();
        start = start.min(s);
        end = end.max(s + l);
    }
    (start, end - start)
}

/// The rows of `event_id` in row group `group` of a file whose needed parts are in `file`.
///
/// # Errors
/// A row group that does not decode.
pub fn rows_of(file: Sparse, group: usize, event_id: &str) -> Result<Vec<ArchivedRow>, String> {
    let reader = SerializedFileReader::new(file).map_err(|e| e.to_string())?;
    let rg = reader.get_row_group(group).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for row in rg.get_row_iter(None).map_err(|e| e.to_string())? {
        let row = to_row(&row.map_err(|e| e.to_string())?)?;
        if row.event_id == event_id {
            out.push(row);
        }
    }
    Ok(out)
}

/// Reads a whole `Read` into bytes (for local files in tests and tools).
///
/// # Errors
/// The reader's.
pub fn read_all(mut r: impl Read) -> std::io::Result<Bytes> {
    let mut v = Vec::new();
    r.read_to_end(&mut v)?;
    Ok(Bytes::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(event: &str, t: i64, note: Option<&str>) -> ArchivedRow {
        ArchivedRow {
            source: "stripe".into(),
            event_id: event.into(),
            outcome: "completed".into(),
            processed: true,
            attempt: Some(1),
            received_at: Timestamp::from_millis(t),
            gap_ms: None,
            fingerprint: Some(vec![7; 32]),
            note: note.map(str::to_owned),
        }
    }

    #[test]
    fn rows_go_in_and_come_back_sorted() {
        let mut rows = vec![
            row("evt_b", 2, None),
            row("evt_a", 3, Some("replayed: fixed the handler")),
            row("evt_a", 1, None),
        ];
        let bytes = encode(&mut rows).unwrap();
        let back = decode_all(bytes).unwrap();
        assert_eq!(back, rows);
        assert_eq!(back[0].received_at.as_millis(), 1);
        assert_eq!(back[2].event_id, "evt_b");
    }

    #[test]
    fn a_lookup_reads_only_what_it_needs() {
        let mut rows: Vec<ArchivedRow> = (0..100_000)
            .map(|i| row(&format!("evt_{i:08}"), i, None))
            .collect();
        let bytes = encode(&mut rows).unwrap();
        let len = bytes.len() as u64;
        let tail_at = len - tail_len(len);
        let tail = bytes.slice(tail_at as usize..);
        let meta = metadata(&tail).unwrap();
        assert!(meta.num_row_groups() >= 3);
        let wanted = "evt_00070000";
        let candidates: Vec<usize> = (0..meta.num_row_groups())
            .filter(|&i| may_hold(meta.row_group(i), wanted))
            .collect();
        assert_eq!(
            candidates.len(),
            1,
            "sorted row groups: one range holds the id"
        );
        let g = candidates[0];
        let mut file = Sparse::new(len);
        file.add(tail_at, tail);
        let (bs, bl) = bloom_span(meta.row_group(g)).expect("a bloom filter");
        file.add(bs, bytes.slice(bs as usize..(bs + bl) as usize));
        assert!(bloom_admits(meta.row_group(g), &file, wanted).unwrap());
        assert!(!bloom_admits(meta.row_group(g), &file, "evt_00070000x").unwrap());
        let (s, l) = group_span(meta.row_group(g));
        file.add(s, bytes.slice(s as usize..(s + l) as usize));
        let found = rows_of(file, g, wanted).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].received_at.as_millis(), 70_000);
    }

    #[test]
    fn a_file_of_another_schema_is_named_as_such() {
        let schema = Arc::new(parse_message_type("message other { REQUIRED INT64 x; }").unwrap());
        let mut w = SerializedFileWriter::new(Vec::new(), schema, Default::default()).unwrap();
        let mut g = w.next_row_group().unwrap();
        let mut c = g.next_column().unwrap().unwrap();
        c.typed::<Int64Type>()
            .write_batch(&[1], None, None)
            .unwrap();
        c.close().unwrap();
        g.close().unwrap();
        let bytes = Bytes::from(w.into_inner().unwrap());
        let e = decode_all(bytes).unwrap_err();
        assert!(e.contains("not an idemgate history file"), "{e}");
        assert!(
            decode_all(Bytes::from_static(b"hello"))
                .unwrap_err()
                .contains("not a Parquet file")
        );
    }
}
