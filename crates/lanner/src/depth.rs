//! A bound on how deeply nested a decoded value may be.
//!
//! postcard, like serde itself, decodes nested values by recursion. For a type that can
//! contain itself (`enum Tree { Leaf, Node(Box<Tree>) }`) a peer can send one byte per
//! level, and a 16 MiB frame nests deep enough to overflow any thread's stack, which aborts
//! the whole process. [`Limited`] wraps a deserializer (and everything it hands out: the
//! visitors, sequence, map and enum accessors, and the seeds for nested values) and refuses
//! to go more than a fixed number of levels deep, with an ordinary decode error.
//!
//! Depth is counted on entering a nested value: a sequence element, a map key or value, an
//! `Option`'s content, a newtype's content, an enum variant's content.

use std::cell::Cell;

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

/// Values nested deeper than this are refused. Real messages nest a handful of levels;
/// 128 levels of recursion take well under a megabyte of stack.
pub(crate) const MAX_DEPTH: usize = 128;

thread_local! {
    /// Set when a decode on this thread went too deep: formats such as postcard replace a
    /// custom error's message with a generic one, so the reason travels here.
    static TOO_DEEP: Cell<bool> = const { Cell::new(false) };
}

/// Whether the last decode on this thread failed for being nested too deeply (and
/// forgets it).
pub(crate) fn took_too_deep() -> bool {
    TOO_DEEP.with(|flag| flag.replace(false))
}

/// The message for a value nested too deeply.
pub(crate) fn too_deep_message() -> String {
    format!("the value is nested more than {MAX_DEPTH} levels deep")
}

/// A deserializer, visitor, accessor or seed that may go `depth` more levels down.
pub(crate) struct Limited<T> {
    inner: T,
    depth: usize,
}

impl<T> Limited<T> {
    pub(crate) fn new(inner: T, depth: usize) -> Limited<T> {
        Limited { inner, depth }
    }

    fn wrap<U>(&self, inner: U) -> Limited<U> {
        Limited {
            inner,
            depth: self.depth,
        }
    }

    /// `inner`, one level further down; an error if that is too deep.
    fn nested<U, E: de::Error>(&self, inner: U) -> Result<Limited<U>, E> {
        match self.depth.checked_sub(1) {
            Some(depth) => Ok(Limited { inner, depth }),
            None => {
                TOO_DEEP.with(|flag| flag.set(true));
                Err(E::custom(too_deep_message()))
            }
        }
    }
}

/// Forwards `deserialize_*` methods that take only a visitor.
macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let visitor = self.wrap(visitor);
            self.inner.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Limited<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.wrap(visitor);
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Forwards `visit_*` methods that take one plain value.
macro_rules! forward_visit {
    ($($method:ident($ty:ty))*) => {$(
        fn $method<E: de::Error>(self, value: $ty) -> Result<V::Value, E> {
            self.inner.$method(value)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Limited<V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.expecting(formatter)
    }

    forward_visit! {
        visit_bool(bool) visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64)
        visit_i128(i128) visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64)
        visit_u128(u128) visit_f32(f32) visit_f64(f64) visit_char(char) visit_str(&str)
        visit_borrowed_str(&'de str) visit_string(String) visit_bytes(&[u8])
        visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        let deserializer = self.nested(deserializer)?;
        self.inner.visit_some(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        let deserializer = self.nested(deserializer)?;
        self.inner.visit_newtype_struct(deserializer)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let seq = self.wrap(seq);
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let map = self.wrap(map);
        self.inner.visit_map(map)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let data = self.wrap(data);
        self.inner.visit_enum(data)
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Limited<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        let deserializer = self.wrap(deserializer);
        self.inner.deserialize(deserializer)
    }
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for Limited<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let seed = self.nested(seed)?;
        self.inner.next_element_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for Limited<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let seed = self.nested(seed)?;
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        let seed = self.nested(seed)?;
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::EnumAccess<'de>> de::EnumAccess<'de> for Limited<A> {
    type Error = A::Error;
    type Variant = Limited<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Limited<A::Variant>), A::Error> {
        let seed = self.wrap(seed);
        let (value, variant) = self.inner.variant_seed(seed)?;
        let variant = Limited {
            inner: variant,
            depth: self.depth,
        };
        Ok((value, variant))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Limited<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        let seed = self.nested(seed)?;
        self.inner.newtype_variant_seed(seed)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = self.nested(visitor)?;
        self.inner.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = self.nested(visitor)?;
        self.inner.struct_variant(fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use crate::marshal::decode_inline;

    /// A type that can contain itself.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Tree {
        Leaf,
        Node(Box<Tree>),
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct List {
        next: Option<Box<List>>,
        values: Vec<Vec<u8>>,
    }

    fn tree(depth: usize) -> Tree {
        (0..depth).fold(Tree::Leaf, |tree, _| Tree::Node(Box::new(tree)))
    }

    #[test]
    fn moderately_nested_values_decode() {
        let value = tree(super::MAX_DEPTH - 2);
        let bytes = postcard::to_allocvec(&value).unwrap();
        assert_eq!(decode_inline::<Tree>(&bytes), Ok(value));
        let list = List {
            next: Some(Box::new(List {
                next: None,
                values: vec![vec![1, 2], vec![]],
            })),
            values: vec![vec![3]],
        };
        let bytes = postcard::to_allocvec(&list).unwrap();
        assert_eq!(decode_inline::<List>(&bytes), Ok(list));
    }

    #[test]
    fn a_hostile_nesting_is_an_error_not_a_stack_overflow() {
        // One byte per level: variant 1 (`Node`) ten million times, then a `Leaf`.
        let mut bytes = vec![1u8; 10_000_000];
        bytes.push(0);
        let error = decode_inline::<Tree>(&bytes).unwrap_err();
        assert!(error.message().contains("nested more than"), "{error}");
        // The same through `Option` and sequences.
        let mut bytes = Vec::new();
        for _ in 0..1_000_000 {
            bytes.extend_from_slice(&[1]); // Some
        }
        let error = decode_inline::<List>(&bytes).unwrap_err();
        assert!(error.message().contains("nested more than"), "{error}");
    }
}
