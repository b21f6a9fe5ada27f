// Generated from conveyor.protocol by `python -m conveyor.server.uinames`: do not edit.
// A test fails when this file is out of date.

/** Every task status, in the order the UI lists them (protocol.TaskStatus). */
export const STATES = ["PENDING", "RUNNING", "DONE", "FAILED", "DISABLED", "UNKNOWN"];

/** Each task status by name: `STATUS.FAILED` rather than a string of one's own. */
export const STATUS = Object.freeze({
  PENDING: "PENDING",
  RUNNING: "RUNNING",
  DONE: "DONE",
  FAILED: "FAILED",
  DISABLED: "DISABLED",
  UNKNOWN: "UNKNOWN",
});

/** Each attempt outcome (protocol.AttemptEnd) and how the UI shows it. */
export const ATTEMPT_ENDS = {
  "succeeded": "succeeded",
  "failed": "failed",
  "timed_out": "timed out",
  "process_died": "process died",
  "interrupted": "interrupted",
};
