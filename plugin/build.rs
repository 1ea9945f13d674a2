//! The hook contract's name and version come from the WIT package declaration, read by the SDK's
//! build script, so the host and the SDK cannot disagree about them.
include!("../hooks-sdk/build.rs");
