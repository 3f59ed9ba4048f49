//! The steps of a sticky `kgroups assign` at Kafka's reference scale (a million partitions,
//! thousands of members) whose cost in Python is creating or reading one Python object per
//! partition: checking the scenario's members, writing every member's sticky user data,
//! reading it back as claims, reading cooperative members' owned partitions as claims, and
//! turning the owner array into each member's topic -> partitions dict. Each function here
//! gives what its Python counterpart in `kgroups.assignors` gives (that code stays as the
//! reference, and tests/assignors/test_native.py compares the two on the same inputs).

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyList, PySet, PyString, PyTuple};
use std::collections::HashMap;

const ENTRY_HEADER: usize = 6; // int16 name length + int32 partition count
const NO_GENERATION: i64 = -1;

/// Contiguous native-endian items of a buffer (a numpy array), copied out.
fn items<T: pyo3::buffer::Element + Copy>(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
) -> PyResult<Vec<T>> {
    pyo3::buffer::PyBuffer::<T>::get(array)?.to_vec(py)
}

fn int32(value: i64) -> PyResult<i32> {
    i32::try_from(value).map_err(|_| {
        PyOverflowError::new_err("sticky user data holds int32 partitions and generations")
    })
}

/// The numbers of one partition list (a list, a tuple or any iterable of ints), appended.
fn read_numbers(partitions: &Bound<'_, PyAny>, numbers: &mut Vec<i64>) -> PyResult<()> {
    if let Ok(list) = partitions.downcast::<PyList>() {
        for p in list.iter() {
            numbers.push(p.extract::<i64>()?);
        }
    } else if let Ok(tuple) = partitions.downcast::<PyTuple>() {
        for p in tuple.iter() {
            numbers.push(p.extract::<i64>()?);
        }
    } else {
        for p in partitions.try_iter()? {
            numbers.push(p?.extract::<i64>()?);
        }
    }
    Ok(())
}

/// Calls `each` with every (topic, partitions) entry of one member's mapping: a dict's items,
/// or any mapping's items().
fn for_each_entry<'py>(
    mapping: &Bound<'py, PyAny>,
    mut each: impl FnMut(Bound<'py, PyAny>, Bound<'py, PyAny>) -> PyResult<()>,
) -> PyResult<()> {
    if let Ok(dict) = mapping.downcast::<PyDict>() {
        for (topic, partitions) in dict.iter() {
            each(topic, partitions)?;
        }
    } else {
        for item in mapping.call_method0("items")?.try_iter()? {
            let (topic, partitions): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
            each(topic, partitions)?;
        }
    }
    Ok(())
}

/// One member's history read into `entries` (topic name, start and end in `numbers`).
fn read_history<'py>(
    assignment: &Bound<'py, PyAny>,
    entries: &mut Vec<(Bound<'py, PyString>, usize, usize)>,
    numbers: &mut Vec<i64>,
) -> PyResult<()> {
    for_each_entry(assignment, |topic, partitions| {
        let start = numbers.len();
        read_numbers(&partitions, numbers)?;
        entries.push((topic.downcast_into::<PyString>()?, start, numbers.len()));
        Ok(())
    })
}

/// Claims from every member's topic -> partitions mapping (owned-partitions fields), as
/// `claims_from_mappings` reads them: (member, topic position from `index`, -1 for a name it
/// lacks, partition) per listed partition, members in order, each one's entries in mapping
/// order and partitions as listed; native-endian int64 bytes.
#[pyfunction]
fn claims_from_mappings<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyDict>,
    owned: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (mut member, mut topic, mut partition) = (Vec::new(), Vec::new(), Vec::new());
    for (position, mapping) in owned.try_iter()?.enumerate() {
        for_each_entry(&mapping?, |name, partitions| {
            let at = match index.get_item(&name)? {
                Some(at) => at.extract::<i64>()?,
                None => -1,
            };
            let start = partition.len();
            read_numbers(&partitions, &mut partition)?;
            let listed = partition.len() - start;
            member.resize(member.len() + listed, position as i64);
            topic.resize(topic.len() + listed, at);
            Ok(())
        })?;
    }
    PyTuple::new(
        py,
        [
            int64_array(py, &member),
            int64_array(py, &topic),
            int64_array(py, &partition),
        ],
    )
}

/// StickyAssignorUserData v1 of each (previous assignment, generation): topics in name order
/// (UTF-8 byte order, which is code point order), partitions ascending. As
/// `encode_sticky_user_data_of_group`.
#[pyfunction]
fn encode_sticky_user_data_of_group<'py>(
    py: Python<'py>,
    previous_assignments: &Bound<'py, PyAny>,
    generations: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let assignments: Vec<Bound<'py, PyAny>> =
        previous_assignments.try_iter()?.collect::<PyResult<_>>()?;
    let generations: Vec<i64> = generations
        .try_iter()?
        .map(|g| g?.extract::<i64>())
        .collect::<PyResult<_>>()?;
    if generations.len() != assignments.len() {
        return Err(PyValueError::new_err(
            "one generation per previous assignment",
        ));
    }
    let blobs = PyList::empty(py);
    let mut entries = Vec::new();
    let mut numbers = Vec::new();
    let mut blob: Vec<u8> = Vec::new();
    for (assignment, generation) in assignments.iter().zip(&generations) {
        entries.clear();
        numbers.clear();
        read_history(assignment, &mut entries, &mut numbers)?;
        let generation = int32(*generation)?;
        for number in &numbers {
            int32(*number)?;
        }
        let mut named = Vec::with_capacity(entries.len());
        for (topic, start, end) in &entries {
            named.push((topic.to_str()?, *start, *end));
        }
        if !named
            .windows(2)
            .all(|w| w[0].0.as_bytes() <= w[1].0.as_bytes())
        {
            named.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        }
        blob.clear();
        blob.extend_from_slice(&(named.len() as i32).to_be_bytes());
        for (name, start, end) in named {
            let Ok(length) = i16::try_from(name.len()) else {
                // What struct.pack(">h", ...) raises on the Python path.
                let error = py.import("struct")?.getattr("error")?;
                let message = "'h' format requires -32768 <= number <= 32767";
                return Err(PyErr::from_value(error.call1((message,))?));
            };
            blob.extend_from_slice(&length.to_be_bytes());
            blob.extend_from_slice(name.as_bytes());
            blob.extend_from_slice(&((end - start) as i32).to_be_bytes());
            let partitions = &mut numbers[start..end];
            if !partitions.windows(2).all(|w| w[0] <= w[1]) {
                partitions.sort_unstable();
            }
            for partition in partitions.iter() {
                blob.extend_from_slice(&(*partition as i32).to_be_bytes());
            }
        }
        blob.extend_from_slice(&generation.to_be_bytes());
        blobs.append(PyBytes::new(py, &blob))?;
    }
    Ok(blobs)
}

/// A topic entry found in a blob: its name and partitions as byte ranges of that blob.
struct Entry {
    name_start: usize,
    name_length: usize,
    partitions_start: usize,
    partition_count: usize,
}

/// What the Java layout parse finds in one blob: None when the blob is not that layout.
struct Parsed {
    entries: Vec<Entry>,
    generation: i64,
}

fn read_i16(data: &[u8], at: usize) -> i64 {
    i16::from_be_bytes([data[at], data[at + 1]]) as i64
}

fn read_i32(data: &[u8], at: usize) -> i64 {
    i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]) as i64
}

/// The Java layout of one blob (v1, or v0 without the trailing generation), with the same
/// bounds the Python parser checks: counts never negative nor larger than the bytes left.
fn walk(data: &[u8]) -> Option<Parsed> {
    if data.len() < 4 {
        return None;
    }
    let topic_count = read_i32(data, 0);
    let mut position = 4usize;
    if topic_count < 0 || topic_count > ((data.len() - position) / ENTRY_HEADER) as i64 {
        return None;
    }
    let mut entries = Vec::with_capacity(topic_count as usize);
    for _ in 0..topic_count {
        let room = data.len() - position;
        if room < ENTRY_HEADER {
            return None;
        }
        let name_length = read_i16(data, position);
        if name_length < 0 || name_length > (room - ENTRY_HEADER) as i64 {
            return None;
        }
        let name_length = name_length as usize;
        let partition_count = read_i32(data, position + 2 + name_length);
        if partition_count < 0 || partition_count > ((room - ENTRY_HEADER - name_length) / 4) as i64
        {
            return None;
        }
        let partition_count = partition_count as usize;
        entries.push(Entry {
            name_start: position + 2,
            name_length,
            partitions_start: position + ENTRY_HEADER + name_length,
            partition_count,
        });
        position += ENTRY_HEADER + name_length + 4 * partition_count;
    }
    match data.len() - position {
        0 => Some(Parsed {
            entries,
            generation: NO_GENERATION,
        }),
        4 => Some(Parsed {
            entries,
            generation: read_i32(data, position),
        }),
        _ => None,
    }
}

/// Java layout first; a blob that fails it and starts with an int16 version 0 or 1 is read
/// again after that prefix (kafka-python's form).
fn parse(data: &[u8]) -> Option<Parsed> {
    walk(data).or_else(|| {
        if data.len() >= 2 && matches!(read_i16(data, 0), 0 | 1) {
            walk(&data[2..])
        } else {
            None
        }
    })
}

fn int64_array<'py>(py: Python<'py>, values: &[i64]) -> Bound<'py, PyByteArray> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    PyByteArray::new(py, &bytes)
}

/// Every member's previous assignment from its sticky user data, as `sticky_claims` gives it:
/// (member, topic position, partition) per listed partition, each blob's generation, and which
/// blobs were present but unreadable; the int64 columns as native-endian bytes, in the Python
/// parser's row order (entry k of every blob before entry k + 1; kafka-python's form last).
#[pyfunction]
fn sticky_claims<'py>(
    py: Python<'py>,
    topics: &Bound<'py, PyAny>,
    blobs: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut position_of: HashMap<Vec<u8>, i64> = HashMap::new();
    for (position, topic) in topics.try_iter()?.enumerate() {
        let topic = topic?;
        let name = topic.downcast::<PyString>()?.to_str()?.as_bytes().to_vec();
        position_of.insert(name, position as i64);
    }
    let blobs: Vec<Option<Bound<'py, PyBytes>>> = blobs
        .try_iter()?
        .map(|b| {
            let b = b?;
            if b.is_none() {
                Ok(None)
            } else {
                Ok(Some(b.downcast_into::<PyBytes>()?))
            }
        })
        .collect::<PyResult<_>>()?;
    let mut generation = vec![NO_GENERATION; blobs.len()];
    let mut unreadable = vec![0u8; blobs.len()];
    // (is kafka-python's form, blob index, parse)
    let mut found: Vec<(bool, usize, Parsed)> = Vec::new();
    for (index, blob) in blobs.iter().enumerate() {
        let data = match blob {
            Some(b) if !b.as_bytes().is_empty() => b.as_bytes(),
            _ => continue,
        };
        let parsed = match walk(data) {
            Some(p) => Some((false, p)),
            None => parse(data).map(|p| (true, p)),
        };
        match parsed {
            Some((prefixed, p)) => {
                generation[index] = p.generation;
                found.push((prefixed, index, p));
            }
            None => unreadable[index] = 1,
        }
    }
    let (mut member, mut topic, mut partition) = (Vec::new(), Vec::new(), Vec::new());
    let (mut last_name, mut last_at): (&[u8], i64) = (&[], -1);
    for prefixed in [false, true] {
        let group: Vec<&(bool, usize, Parsed)> =
            found.iter().filter(|(p, _, _)| *p == prefixed).collect();
        let most = group
            .iter()
            .map(|(_, _, p)| p.entries.len())
            .max()
            .unwrap_or(0);
        for k in 0..most {
            for (_, index, parsed) in group.iter().filter(|(_, _, p)| p.entries.len() > k) {
                let data = blobs[*index]
                    .as_ref()
                    .map(|b| b.as_bytes())
                    .unwrap_or_default();
                let data = if prefixed { &data[2..] } else { data };
                let entry = &parsed.entries[k];
                let name = &data[entry.name_start..entry.name_start + entry.name_length];
                // Entry k of every blob usually names the same topic: ask the map only when
                // the name differs from the previous entry's.
                if name != last_name {
                    last_name = name;
                    last_at = if name.is_empty() {
                        -1
                    } else {
                        *position_of.get(name).unwrap_or(&-1)
                    };
                }
                let at = last_at;
                for i in 0..entry.partition_count {
                    member.push(*index as i64);
                    topic.push(at);
                    partition.push(read_i32(data, entry.partitions_start + 4 * i));
                }
            }
        }
    }
    PyTuple::new(
        py,
        [
            int64_array(py, &member).into_any(),
            int64_array(py, &topic).into_any(),
            int64_array(py, &partition).into_any(),
            int64_array(py, &generation).into_any(),
            PyByteArray::new(py, &unreadable).into_any(),
        ],
    )
}

/// An empty dict with room for `size` keys (a member's topics), so filling it never resizes.
fn presized_dict(py: Python<'_>, size: usize) -> PyResult<Bound<'_, PyDict>> {
    // SAFETY: _PyDict_NewPresized returns a new reference to an empty dict, or NULL with an
    // exception set.
    unsafe {
        let dict = pyo3::ffi::_PyDict_NewPresized(size as pyo3::ffi::Py_ssize_t);
        if dict.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, dict).downcast_into_unchecked())
    }
}

/// A list of these objects, filled in place (pyo3's PyList::new converts each item through
/// its generic conversion, which costs more here than the list itself).
fn new_list<'py, 'a>(
    py: Python<'py>,
    objects: impl ExactSizeIterator<Item = &'a Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>>
where
    'py: 'a,
{
    let length = objects.len();
    // SAFETY: PyList_New returns a new reference to a list of `length` NULL slots (or NULL
    // with an exception set); each slot is then set exactly once to a new reference, which
    // the list steals, before the list is handed to Python.
    unsafe {
        let list = pyo3::ffi::PyList_New(length as pyo3::ffi::Py_ssize_t);
        if list.is_null() {
            return Err(PyErr::fetch(py));
        }
        for (i, object) in objects.enumerate() {
            pyo3::ffi::PyList_SET_ITEM(list, i as pyo3::ffi::Py_ssize_t, object.clone().into_ptr());
        }
        Ok(Bound::from_owned_ptr(py, list).downcast_into_unchecked())
    }
}

/// Every member's topic -> partitions from the owner array (int32 member index per flat
/// partition, negative for nobody), as `GroupAssignment._all_grouped` gives it: members in
/// `member_ids` order, each one's topics in flat order, partitions ascending.
#[pyfunction]
fn group_owners<'py>(
    py: Python<'py>,
    owners: &Bound<'py, PyAny>,
    offsets: &Bound<'py, PyAny>,
    topics: &Bound<'py, PyTuple>,
    member_ids: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyDict>> {
    let owners: Vec<i32> = items(py, owners)?;
    let offsets: Vec<i64> = items(py, offsets)?;
    let members = member_ids.len();
    let mut counts = vec![0usize; members + 1];
    for &owner in &owners {
        if owner >= 0 {
            if owner as usize >= members {
                return Err(PyValueError::new_err("an owner is not a member"));
            }
            counts[owner as usize + 1] += 1;
        }
    }
    for m in 0..members {
        counts[m + 1] += counts[m];
    }
    // Flat numbers grouped by member, ascending within each (a counting sort).
    let mut next = counts.clone();
    let mut by_member = vec![0usize; *counts.last().unwrap_or(&0)];
    for (flat, &owner) in owners.iter().enumerate() {
        if owner >= 0 {
            by_member[next[owner as usize]] = flat;
            next[owner as usize] += 1;
        }
    }
    // Partition numbers as Python ints made once each and shared by every list, as the
    // lists hold equal ints either way.
    let widest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let numbers: Vec<Bound<'py, PyAny>> = (0..widest)
        .map(|n| match n.into_pyobject(py) {
            Ok(n) => n.into_any(),
            Err(never) => match never {},
        })
        .collect();
    let topic_names: Vec<Bound<'py, PyAny>> = topics.iter().collect();
    let result = PyDict::new(py);
    for m in 0..members {
        result.set_item(member_ids.get_item(m)?, PyDict::new(py))?;
    }
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for m in 0..members {
        let flats = &by_member[counts[m]..counts[m + 1]];
        if flats.is_empty() {
            continue;
        }
        // Runs of one topic: (topic position, start, end) in `flats`.
        runs.clear();
        let mut run_start = 0;
        while run_start < flats.len() {
            // The topic holding this flat number: the last offset at or below it.
            let t = offsets.partition_point(|&o| o <= flats[run_start] as i64) - 1;
            let mut run_end = run_start;
            while run_end < flats.len() && (flats[run_end] as i64) < offsets[t + 1] {
                run_end += 1;
            }
            runs.push((t, run_start, run_end));
            run_start = run_end;
        }
        let grouped = presized_dict(py, runs.len())?;
        for &(t, start, end) in &runs {
            let base = offsets[t];
            let run = flats[start..end]
                .iter()
                .map(|&f| &numbers[(f as i64 - base) as usize]);
            grouped.set_item(&topic_names[t], new_list(py, run)?)?;
        }
        result.set_item(member_ids.get_item(m)?, grouped)?;
    }
    Ok(result)
}

/// Whether an int is exactly an int (not a bool or other subclass) within int32.
fn exact_int32(value: &Bound<'_, PyAny>) -> bool {
    value.is_exact_instance_of::<PyInt>()
        && value
            .extract::<i64>()
            .is_ok_and(|v| i32::try_from(v).is_ok())
}

fn exact_str_or_none(value: Option<Bound<'_, PyAny>>) -> bool {
    value.is_none_or(|v| v.is_none() || v.is_exact_instance_of::<PyString>())
}

/// One member's spec passes every check of `all_members_well_formed`.
fn member_well_formed(spec: &Bound<'_, PyAny>, known: &Bound<'_, PySet>) -> PyResult<bool> {
    let Ok(spec) = spec.downcast_exact::<PyDict>() else {
        return Ok(false);
    };
    let Some(topics) = spec.get_item("topics")? else {
        return Ok(false);
    };
    let Ok(topics) = topics.downcast_exact::<PyList>() else {
        return Ok(false);
    };
    let mut subscribes_to_known = false;
    for topic in topics.iter() {
        if !topic.is_exact_instance_of::<PyString>() {
            return Ok(false);
        }
        subscribes_to_known = subscribes_to_known || known.contains(&topic)?;
    }
    let generation_ok = spec.get_item("generation")?.is_none_or(|g| exact_int32(&g));
    if !subscribes_to_known
        || !generation_ok
        || !exact_str_or_none(spec.get_item("rack")?)
        || !exact_str_or_none(spec.get_item("instance_id")?)
    {
        return Ok(false);
    }
    let Some(owned) = spec.get_item("owned")? else {
        return Ok(true);
    };
    let Ok(owned) = owned.downcast_exact::<PyDict>() else {
        return Ok(false);
    };
    for partitions in owned.values().iter() {
        let Ok(partitions) = partitions.downcast_exact::<PyList>() else {
            return Ok(false);
        };
        if !partitions.iter().all(|p| exact_int32(&p)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether every member spec of a scenario is well formed, as
/// `kgroups.assignors.scenario.all_members_well_formed` decides it: an exact dict whose
/// "topics" is a list of str naming at least one of `known`, "owned" (if there) a dict of
/// lists of int32 ints, "generation" (if there) an int32 int, "rack" and "instance_id" (if
/// there) str or None. Exact types (no subclasses, no bools), as there.
#[pyfunction]
fn all_members_well_formed(specs: &Bound<'_, PyList>, known: &Bound<'_, PySet>) -> PyResult<bool> {
    for spec in specs.iter() {
        if !member_well_formed(&spec, known)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[pymodule]
fn kgroups_sticky_assign(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(encode_sticky_user_data_of_group, module)?)?;
    module.add_function(wrap_pyfunction!(sticky_claims, module)?)?;
    module.add_function(wrap_pyfunction!(group_owners, module)?)?;
    module.add_function(wrap_pyfunction!(all_members_well_formed, module)?)?;
    module.add_function(wrap_pyfunction!(claims_from_mappings, module)?)?;
    Ok(())
}
