// ddstore-torch: ThreadDataLoader's worker slots (see loader.h): the pool
// of thread readers and reuse_buffers sets its workers take and give back.
// Every call is made with the GIL held, which is the pool's lock.
#include "loader.h"

namespace ddstore_torch {

Slots::Slots(py::list open, py::object alloc, py::object release, int64_t batch_size)
    : open_(std::move(open)), alloc_(std::move(alloc)), release_(std::move(release)),
      batch_size_(batch_size)
{
}

py::object Slots::take(bool readers)
{
    const bool want = readers && py::len(open_) > 0;
    py::object slot;
    for (size_t k = 0; k < py::len(free_); ++k) {
        py::object s = free_[k];
        if ((py::len(s.cast<Slot &>().readers) > 0) == want) {
            slot = s;
            PySequence_DelItem(free_.ptr(), static_cast<Py_ssize_t>(k));
            break;
        }
    }
    try {
        if (!slot) {
            slot = py::cast(Slot());
            all_.append(slot);
            if (want)   // (a reader opened before a failure is closed by close())
                for (py::handle d : open_)
                    slot.cast<Slot &>().readers.append(
                        py::make_tuple(d, d.attr("ddstore").attr("open_reader")()));
        }
        Slot &s = slot.cast<Slot &>();
        if (!alloc_.is_none() && s.bufs.is_none())   // new, or released by close()
            s.bufs = alloc_(batch_size_);
    } catch (...) {
        if (slot)
            free_.append(slot);
        throw;
    }
    return slot;
}

void Slots::give(py::object slot) { free_.append(std::move(slot)); }

bool Slots::is_free(py::handle slot) const
{
    for (py::handle s : free_)
        if (s.is(slot))
            return true;
    return false;
}

void Slots::free_slot(Slot &s, bool readers)
{
    std::vector<std::pair<py::object, py::object>> calls;   // (function, argument)
    if (!s.bufs.is_none())
        calls.emplace_back(release_, s.bufs);
    if (readers)
        for (py::handle r : s.readers)
            calls.emplace_back(py::reinterpret_borrow<py::tuple>(r)[1].attr("close"),
                               py::object());
    for (auto &c : calls) {
        try {
            if (c.second)
                c.first(c.second);
            else
                c.first();
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_Exception))   // (the store was freed: nothing left)
                throw;
        }
    }
    s.bufs = py::none();
    if (readers)
        s.readers = py::list();
}

void Slots::release(py::list slots)
{
    for (py::handle h : slots)
        if (is_free(h))
            free_slot(h.cast<Slot &>(), false);
}

void Slots::close()
{
    py::list all = all_;
    all_ = py::list();
    free_ = py::list();
    for (py::handle h : all)
        free_slot(h.cast<Slot &>(), true);
}

}  // namespace ddstore_torch
