package transport

// Type returns the QP's transport service (RC or UD).
func (qp *QP) Type() QPType { return qp.typ }

// Device returns the device the QP belongs to.
func (qp *QP) Device() *Device { return qp.dev }
