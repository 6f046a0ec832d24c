//! The interfaces shared by `calculator_server` and `calculator_client`. In a real project
//! they live in a crate both depend on.

use serde::{Deserialize, Serialize};

/// A calculator with a typed application error.
#[lanner::interface(name = "examples.Calculator")]
pub(crate) trait Calculator {
    /// `a + b`.
    async fn add(&self, a: i64, b: i64) -> Result<i64, CalcError>;
    /// `a / b`.
    async fn divide(&self, a: i64, b: i64) -> Result<i64, CalcError>;
}

/// Version 2 of the calculator: every version-1 method, plus one. A server serving it
/// serves version-1 clients too.
#[lanner::interface(name = "examples.CalculatorV2")]
pub(crate) trait CalculatorV2: Calculator {
    /// `base` to the power `exp`.
    async fn power(&self, base: i64, exp: u32) -> Result<i64, CalcError>;
}

/// A second interface of the same object.
#[lanner::interface(name = "examples.Memory")]
pub(crate) trait Memory {
    /// Stores a value, returning the previous one.
    async fn store(&self, value: i64) -> Result<i64, lanner::Error>;
    /// The stored value.
    async fn recall(&self) -> Result<i64, lanner::Error>;
}

/// What can go wrong, as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CalcError {
    /// Division by zero.
    DivisionByZero,
    /// The call itself failed (network, server gone, …).
    Rpc(lanner::Error),
}

impl From<lanner::Error> for CalcError {
    fn from(error: lanner::Error) -> Self {
        CalcError::Rpc(error)
    }
}

impl std::fmt::Display for CalcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CalcError::DivisionByZero => f.write_str("division by zero"),
            CalcError::Rpc(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for CalcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CalcError::DivisionByZero => None,
            CalcError::Rpc(error) => Some(error),
        }
    }
}
