package nvme

import "math/bits"

// What the gateway reads of the admin queue's Identify and Property Get
// commands (the NVMe base specification, 2.0: Identify's CNS in CDW10
// bits 7:0, the Identify Controller data structure's MDTS at byte 77,
// CAP's MPSMIN in bits 51:48; struct nvmf_property_get_command's offset
// at byte 44).
const (
	// CNSController is Identify's CNS of the Identify Controller data
	// structure.
	CNSController = 0x01
	// IdentifyMDTS is where the Identify Controller data structure holds
	// MDTS, the controller's largest data transfer: a power of two in
	// units of CAP.MPSMIN's page, 0 for no limit.
	IdentifyMDTS = 77
	// PropertyCAP is the Controller Capabilities property's offset.
	PropertyCAP = 0
)

// IdentifyCNS returns an Identify command's CNS (CDW10 bits 7:0).
func (c Command) IdentifyCNS() uint8 { return uint8(c.DWord(10)) }

// PropertyOffset returns a Property Get or Set command's property offset.
func (c Command) PropertyOffset() uint32 { return c.DWord(11) }

// CAPMinPageShift returns the shift of the smallest memory page a
// controller whose Controller Capabilities are capValue supports:
// 12 + CAP.MPSMIN.
func CAPMinPageShift(capValue uint64) uint { return 12 + uint(capValue>>48&0xf) }

// ClampMDTS returns the MDTS that bounds a controller's transfers to at
// most maxBytes, given its MDTS and the shift of its smallest page
// (CAPMinPageShift): mdts itself when it already does, and changed
// false. A maxBytes under two pages cannot be said in MDTS (1 is two
// pages, 0 no limit): mdts comes back unchanged.
func ClampMDTS(mdts uint8, pageShift uint, maxBytes int) (clamped uint8, changed bool) {
	if maxBytes <= 0 || pageShift >= 63 {
		return mdts, false
	}
	pages := uint64(maxBytes) >> pageShift
	if pages < 2 {
		return mdts, false
	}
	most := uint8(bits.Len64(pages) - 1) // the largest power of two of pages within maxBytes
	if mdts != 0 && mdts <= most {
		return mdts, false
	}
	return most, true
}
