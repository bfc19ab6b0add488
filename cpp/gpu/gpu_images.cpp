// The training images on the device (docs/gpu.md, "The GPU training step"):
// uploaded once as packed uint8 views, or streamed from host memory a view a
// step ahead when they do not fit the budget; a view's pixels as the loss
// reads them.
#include <algorithm>
#include <cstring>

#include "gpu_device.h"
#include "splat/errors.h"

namespace splat::gpu {

void GpuDevice::upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ImageLayout layout = plan_image_layout(images);
  ImageStorage st;
  st.image_bytes = layout.rgb_bytes + layout.mask_bytes;
  st.budget_bytes = budget_bytes;
  if (budget_bytes == 0) {
    // Default: half the device memory free now (the state, the binning and
    // the per-pixel buffers grow into the rest); unknown: resident.
    size_t free_bytes = 0, total_bytes = 0;
    if (launcher_->memory_info(&free_bytes, &total_bytes)) st.budget_bytes = free_bytes / 2;
  }
  st.streamed = st.budget_bytes > 0 && st.image_bytes > st.budget_bytes;
  if (host_images_) {
    launcher_->release_host(host_images_);
    host_images_ = nullptr;
  }
  staged_view_[0] = staged_view_[1] = -1;
  current_slot_ = 0;
  begin(TimingLabel::Upload);
  if (!st.streamed) {
    BufferRef rgb = ensure(kImages, layout.rgb_bytes);
    BufferRef masks = ensure(kMasks, layout.mask_bytes);
    for (size_t v = 0; v < images.size(); ++v) {
      const ImageSlot& slot = layout.views[v];
      const size_t pixels = static_cast<size_t>(slot.width) * slot.height;
      launcher_->upload(BufferRef{rgb.handle, slot.rgb_offset}, images[v].rgb, 3 * pixels);
      if (slot.has_mask) launcher_->upload(BufferRef{masks.handle, slot.mask_offset}, images[v].mask, pixels);
      if (images[v].copied) {
        launcher_->synchronize();  // the copies out of the caller's memory are done
        images[v].copied();
      }
    }
    st.device_bytes = st.image_bytes;
  } else {
    host_images_ = static_cast<uint8_t*>(launcher_->allocate_host(st.image_bytes));
    size_t max_mask = 0;
    for (size_t v = 0; v < images.size(); ++v) {
      const ImageSlot& slot = layout.views[v];
      const size_t pixels = static_cast<size_t>(slot.width) * slot.height;
      std::memcpy(host_images_ + slot.rgb_offset, images[v].rgb, 3 * pixels);
      if (slot.has_mask) {
        std::memcpy(host_images_ + layout.rgb_bytes + slot.mask_offset, images[v].mask, pixels);
        max_mask = std::max(max_mask, pixels);
      }
      if (images[v].copied) images[v].copied();
    }
    const auto align = [](size_t x) { return (x + ImageLayout::kImageAlign - 1) & ~(ImageLayout::kImageAlign - 1); };
    slot_rgb_bytes_ = align(3 * layout.max_pixels);
    slot_mask_bytes_ = align(max_mask);
    ensure(kImages, 2 * slot_rgb_bytes_);
    ensure(kMasks, 2 * slot_mask_bytes_);
    st.device_bytes = 2 * (slot_rgb_bytes_ + slot_mask_bytes_);
  }
  // Sized once for the largest view, so no step on a larger view reallocates.
  reserve_pixels(layout.max_pixels, layout.max_tiles);
  end(TimingLabel::Upload);
  images_ = std::move(layout);
  storage_ = st;
  finish_op(true);
}

void GpuDevice::stage_view(uint32_t view) {
  // Ordered after the work already enqueued, which is the last step's (it
  // read the other slot) and the step before (this slot): the copy overlaps
  // the host's encoding of the next step, and never a kernel reading it.
  const int k = 1 - current_slot_;
  const ImageSlot& slot = images_.views[view];
  const size_t pixels = static_cast<size_t>(slot.width) * slot.height;
  begin(TimingLabel::Upload);
  launcher_->upload(BufferRef{arena_[kImages].handle, k * slot_rgb_bytes_}, host_images_ + slot.rgb_offset,
                    3 * pixels);
  if (slot.has_mask)
    launcher_->upload(BufferRef{arena_[kMasks].handle, k * slot_mask_bytes_},
                      host_images_ + images_.rgb_bytes + slot.mask_offset, pixels);
  end(TimingLabel::Upload);
  staged_view_[k] = view;
}

void GpuDevice::prefetch_image(uint32_t view) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!storage_.streamed || view >= images_.views.size()) return;
  if (staged_view_[0] == view || staged_view_[1] == view) return;
  stage_view(view);
  finish_op(false);
}

std::pair<BufferRef, BufferRef> GpuDevice::view_pixels(uint32_t view) {
  const ImageSlot& slot = images_.views[view];
  if (!storage_.streamed) {
    BufferRef target{arena_[kImages].handle, slot.rgb_offset};
    return {target, slot.has_mask ? BufferRef{arena_[kMasks].handle, slot.mask_offset} : target};
  }
  if (staged_view_[0] != view && staged_view_[1] != view) stage_view(view);  // not fetched ahead
  const int k = staged_view_[0] == view ? 0 : 1;
  current_slot_ = k;
  BufferRef target{arena_[kImages].handle, k * slot_rgb_bytes_};
  return {target, slot.has_mask ? BufferRef{arena_[kMasks].handle, k * slot_mask_bytes_} : target};
}

void GpuDevice::check_view(const CameraParams& cam, uint32_t view) const {
  if (view >= images_.views.size() || cam.width != images_.views[view].width ||
      cam.height != images_.views[view].height)
    throw ConfigError("[trainer] view index or camera size does not match the uploaded images");
}

}  // namespace splat::gpu
