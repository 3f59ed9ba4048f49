//! The bytes every offset commit writes to `__consumer_offsets`: the commit's record key and
//! value, and the uncompressed RecordBatch v2 around the records (varint-framed records, the
//! 61-byte header, its CRC-32C). In Python these cost a dozen small `bytes` objects and struct
//! calls per record, a tenth of a commit's CPU in the broker. Each function here gives what its
//! Python counterpart in `kgroups.log.batch` or `kgroups.records.codec` gives, byte for byte
//! (that code stays as the reference, and tests/log/test_batch_native.py compares the two).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

const HEADER_SIZE: usize = 61;
const LOG_OVERHEAD: usize = 12; // base offset and length: the part the length does not count
const CRC_AT: usize = 17;
const CRC_START: usize = 21; // the CRC covers the batch from the attributes onwards
const MAGIC: u8 = 2;
const COMPRESSION_MASK: i16 = 0x07;

/// Python's `struct.error`, which the Python encoders raise for a number or a length their
/// field cannot hold; raised here for the same inputs, so callers see one behaviour.
fn struct_error(py: Python<'_>, message: &str) -> PyErr {
    match py
        .import("struct")
        .and_then(|module| module.getattr("error"))
    {
        Ok(error_type) => match error_type.call1((message,)) {
            Ok(error) => PyErr::from_value(error),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

fn int16(py: Python<'_>, value: i64) -> PyResult<i16> {
    i16::try_from(value)
        .map_err(|_| struct_error(py, "'h' format requires -32768 <= number <= 32767"))
}

fn int32(py: Python<'_>, value: i64) -> PyResult<i32> {
    i32::try_from(value).map_err(|_| {
        struct_error(
            py,
            "'i' format requires -2147483648 <= number <= 2147483647",
        )
    })
}

/// A signed value as a record's varints carry it (zigzag: small magnitudes, few bytes).
fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Zigzag varint, as every length and delta inside a record is written.
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut rest = zigzag(value);
    while rest > 0x7F {
        out.push((rest as u8 & 0x7F) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

fn varint_size(value: i64) -> usize {
    let bits = 64 - zigzag(value).leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

/// A record's key or value: bytes, any other buffer (a memoryview of a produced batch), or
/// None (a null, length -1).
enum Blob<'py> {
    Null,
    Bytes(Bound<'py, PyBytes>),
    Buffer(Vec<u8>),
}

impl Blob<'_> {
    fn read<'py>(py: Python<'py>, item: Bound<'py, PyAny>) -> PyResult<Blob<'py>> {
        if item.is_none() {
            return Ok(Blob::Null);
        }
        match item.downcast_into::<PyBytes>() {
            Ok(bytes) => Ok(Blob::Bytes(bytes)),
            Err(err) => {
                let buffer = PyBuffer::<u8>::get(&err.into_inner())?;
                Ok(Blob::Buffer(buffer.to_vec(py)?))
            }
        }
    }

    fn data(&self) -> Option<&[u8]> {
        match self {
            Blob::Null => None,
            Blob::Bytes(bytes) => Some(bytes.as_bytes()),
            Blob::Buffer(vec) => Some(vec),
        }
    }
}

fn put_blob(out: &mut Vec<u8>, blob: Option<&[u8]>) {
    match blob {
        None => put_varint(out, -1),
        Some(data) => {
            put_varint(out, data.len() as i64);
            out.extend_from_slice(data);
        }
    }
}

fn blob_size(blob: Option<&[u8]>) -> usize {
    match blob {
        None => 1,
        Some(data) => varint_size(data.len() as i64) + data.len(),
    }
}

/// One `(key, value, timestamp)` record of the caller's sequence.
fn read_record<'py>(
    py: Python<'py>,
    item: &Bound<'py, PyAny>,
) -> PyResult<(Blob<'py>, Blob<'py>, i64)> {
    let (key, value, timestamp) = match item.downcast::<PyTuple>() {
        Ok(tuple) if tuple.len() == 3 => {
            (tuple.get_item(0)?, tuple.get_item(1)?, tuple.get_item(2)?)
        }
        _ if item.len()? == 3 => (item.get_item(0)?, item.get_item(1)?, item.get_item(2)?),
        _ => {
            return Err(PyValueError::new_err(
                "a record is a (key, value, timestamp) tuple",
            ))
        }
    };
    Ok((
        Blob::read(py, key)?,
        Blob::read(py, value)?,
        timestamp.extract::<i64>()?,
    ))
}

/// `(key, value, timestamp)` records as one uncompressed batch with consecutive offsets from
/// `base_offset`, no headers on any record: `kgroups.log.batch.build_batch`'s bytes for
/// `compression=NONE`. `attributes` carries the transactional and control bits.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn build_batch<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    base_offset: i64,
    partition_leader_epoch: i64,
    attributes: i64,
    producer_id: i64,
    producer_epoch: i64,
    base_sequence: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let attributes = int16(py, attributes)?;
    if attributes & COMPRESSION_MASK != 0 {
        return Err(PyValueError::new_err("the compiled batch is uncompressed"));
    }
    let partition_leader_epoch = int32(py, partition_leader_epoch)?;
    let producer_epoch = int16(py, producer_epoch)?;
    let base_sequence = int32(py, base_sequence)?;
    let mut read = Vec::with_capacity(records.len());
    for item in records.iter() {
        read.push(read_record(py, &item)?);
    }
    if read.is_empty() {
        return Err(PyValueError::new_err(
            "a record batch holds at least one record",
        ));
    }
    let base_timestamp = read[0].2;
    let mut max_timestamp = base_timestamp;
    let mut size = HEADER_SIZE;
    // Each record's timestamp delta and body size (what its length varint says).
    let mut framing = Vec::with_capacity(read.len());
    for (delta, (key, value, timestamp)) in read.iter().enumerate() {
        max_timestamp = max_timestamp.max(*timestamp);
        let timestamp_delta = timestamp.checked_sub(base_timestamp).ok_or_else(|| {
            PyOverflowError::new_err("a record's timestamp is too far from the batch's first")
        })?;
        let body = 1 // attributes
            + varint_size(timestamp_delta)
            + varint_size(delta as i64)
            + blob_size(key.data())
            + blob_size(value.data())
            + 1; // header count
        framing.push((timestamp_delta, body));
        size += varint_size(body as i64) + body;
    }
    let count = int32(py, read.len() as i64)?;
    let length = int32(py, (size - LOG_OVERHEAD) as i64)?;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&base_offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&partition_leader_epoch.to_be_bytes());
    out.push(MAGIC);
    out.extend_from_slice(&[0; 4]); // the CRC, once the rest is written
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&(count - 1).to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&producer_id.to_be_bytes());
    out.extend_from_slice(&producer_epoch.to_be_bytes());
    out.extend_from_slice(&base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    for (delta, ((key, value, _), (timestamp_delta, body))) in read.iter().zip(framing).enumerate()
    {
        put_varint(&mut out, body as i64);
        out.push(0); // record attributes
        put_varint(&mut out, timestamp_delta);
        put_varint(&mut out, delta as i64);
        put_blob(&mut out, key.data());
        put_blob(&mut out, value.data());
        put_varint(&mut out, 0); // no headers
    }
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
    Ok(PyBytes::new(py, &out))
}

fn put_string(py: Python<'_>, out: &mut Vec<u8>, value: &str) -> PyResult<()> {
    let length = int16(py, value.len() as i64)?;
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    Ok(())
}

/// An OffsetCommitKey (key types 0 and 1): `kgroups.records.codec.encode_key`'s bytes.
#[pyfunction]
fn offset_commit_key<'py>(
    py: Python<'py>,
    version: i64,
    group: &str,
    topic: &str,
    partition: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(8 + group.len() + topic.len());
    out.extend_from_slice(&int16(py, version)?.to_be_bytes());
    put_string(py, &mut out, group)?;
    put_string(py, &mut out, topic)?;
    out.extend_from_slice(&int32(py, partition)?.to_be_bytes());
    Ok(PyBytes::new(py, &out))
}

/// An OffsetCommitValue of versions 0-3 (the non-flexible ones, which Kafka writes), fields
/// already checked against the version by the caller: `encode_value`'s bytes.
#[pyfunction]
fn offset_commit_value<'py>(
    py: Python<'py>,
    version: i64,
    offset: i64,
    leader_epoch: i64,
    metadata: &str,
    commit_timestamp: i64,
    expire_timestamp: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    if !(0..=3).contains(&version) {
        return Err(PyValueError::new_err(
            "the compiled OffsetCommitValue has versions 0-3",
        ));
    }
    let mut out = Vec::with_capacity(36 + metadata.len());
    out.extend_from_slice(&(version as i16).to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    if version >= 3 {
        out.extend_from_slice(&int32(py, leader_epoch)?.to_be_bytes());
    }
    put_string(py, &mut out, metadata)?;
    out.extend_from_slice(&commit_timestamp.to_be_bytes());
    if version == 1 {
        out.extend_from_slice(&expire_timestamp.to_be_bytes());
    }
    Ok(PyBytes::new(py, &out))
}

#[pymodule]
fn kgroups_record_batch(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(build_batch, module)?)?;
    module.add_function(wrap_pyfunction!(offset_commit_key, module)?)?;
    module.add_function(wrap_pyfunction!(offset_commit_value, module)?)?;
    Ok(())
}
