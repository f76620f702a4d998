//! The enrollment file's record (`enrollments/COOKIE.json`): what a restart re-adopts, the
//! protocol's `EnrollmentRecord` (the wire `Enrollment` is it plus what only the kernel knows).
pub(crate) use redirect_daemon_api::EnrollmentRecord as Record;
